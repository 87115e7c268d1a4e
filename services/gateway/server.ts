import type { FastifyInstance } from 'fastify';

/** Listens, and prints where. Everything else about the app lives in `app.ts`. */
export async function listen(app: FastifyInstance, host: string, port: number): Promise<string> {
  const address = await app.listen({ host, port });
  return address;
}
