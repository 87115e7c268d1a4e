import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Registry } from 'prom-client';
import { z } from 'zod';
import { sendProblem } from './problems.ts';

/**
 * A dependency the service talks to (PostgreSQL, Redis, Kafka, ...). A non-critical one (e.g.
 * Redis for a fail-open rate limiter) is reported when down but does not make the process unready.
 */
export type ReadinessCheck = { readonly name: string; readonly critical?: boolean; check(): Promise<void> };

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
    const critical = new Set(opts.readiness.filter((d) => d.critical !== false).map((d) => d.name));
    const down = results.filter(([name, r]) => r.status === 'down' && critical.has(name)).map(([name]) => name);
    if (down.length > 0) {
      reply.header('retry-after', '5');
      return sendProblem(request, reply, 503, `Not ready: ${down.join(', ')} unavailable`, { checks });
    }
    const degraded = results.some(([, r]) => r.status === 'down');
    return reply.send({ status: degraded ? 'degraded' : 'ready', checks });
  });

  app.get('/metrics', { schema: { hide: true } }, async (_request, reply) => {
    reply.type(opts.registry.contentType);
    return opts.registry.metrics();
  });
};
