import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Registry } from 'prom-client';
import { z } from 'zod';
import { sendProblem } from './problems.ts';

/** A dependency the service needs to serve traffic (PostgreSQL, Redis, Kafka, ...). */
export type ReadinessCheck = { readonly name: string; check(): Promise<void> };

const CHECK_TIMEOUT_MS = 2_000;

const withTimeout = <T>(promise: Promise<T>, ms: number) =>
  Promise.race([
    promise,
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms).unref()),
  ]);

export const healthRoutes: FastifyPluginAsync<{ readiness: readonly ReadinessCheck[]; registry: Registry }> = async (app, opts) => {
  const typed = app.withTypeProvider<ZodTypeProvider>();
  typed.get(
    '/health/live',
    { schema: { hide: true, response: { 200: z.object({ status: z.literal('ok') }) } } },
    async () => ({ status: 'ok' as const }),
  );

  typed.get('/health/ready', { schema: { hide: true } }, async (request, reply) => {
    const results = await Promise.all(
      opts.readiness.map(async (dependency) => {
        try {
          await withTimeout(dependency.check(), CHECK_TIMEOUT_MS);
          return [dependency.name, { status: 'up' }] as const;
        } catch (error) {
          return [dependency.name, { status: 'down', error: (error as Error).message }] as const;
        }
      }),
    );
    const checks = Object.fromEntries(results);
    const down = results.filter(([, r]) => r.status === 'down').map(([name]) => name);
    if (down.length > 0) {
      reply.header('retry-after', '5');
      return sendProblem(request, reply, 503, `Not ready: ${down.join(', ')} unavailable`, { checks });
    }
    return reply.send({ status: 'ready', checks });
  });

  app.get('/metrics', { schema: { hide: true } }, async (_request, reply) => {
    reply.type(opts.registry.contentType);
    return opts.registry.metrics();
  });
};
