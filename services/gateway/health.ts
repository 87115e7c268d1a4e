import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Registry } from 'prom-client';
import { z } from 'zod';
import { sendProblem } from './problems.ts';

/**
 * A dependency the service talks to (PostgreSQL, Redis, Kafka, ...). A non-critical one (Redis for
 * a fail-open rate limiter, Kafka) is reported when down but does not make the process unready.
 */
export type ReadinessCheck = {
  readonly name: string;
  readonly critical?: boolean;
  /** Throws when down; may answer `{ degraded }` when up but impaired (e.g. a projection with parked events). */
  check(): Promise<void | { readonly degraded: string } | undefined>;
};

export type ReadinessResult = { status: 'up' } | { status: 'degraded'; detail: string } | { status: 'down'; error: string };

/** Runs every check (bounded by `timeoutMs` each); `ready` is false when a critical one is down. */
export async function checkReadiness(readiness: readonly ReadinessCheck[], timeoutMs = CHECK_TIMEOUT_MS) {
  const results = await Promise.all(
    readiness.map(async (dependency): Promise<readonly [string, ReadinessResult]> => {
      try {
        const outcome = await withTimeout(dependency.check(), timeoutMs);
        return [dependency.name, outcome ? { status: 'degraded', detail: outcome.degraded } : { status: 'up' }];
      } catch (error) {
        return [dependency.name, { status: 'down', error: (error as Error).message }];
      }
    }),
  );
  const critical = new Set(readiness.filter((d) => d.critical !== false).map((d) => d.name));
  const down = results.filter(([name, r]) => r.status === 'down' && critical.has(name)).map(([name]) => name);
  const degraded = results.some(([, r]) => r.status !== 'up');
  return {
    checks: Object.fromEntries(results),
    down,
    status: down.length > 0 ? ('down' as const) : degraded ? ('degraded' as const) : ('ready' as const),
  };
}

const CHECK_TIMEOUT_MS = 2_000;

const withTimeout = <T>(promise: Promise<T>, ms: number) =>
  Promise.race([promise, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms).unref())]);

export const healthRoutes: FastifyPluginAsync<{ readiness: readonly ReadinessCheck[]; registry: Registry }> = async (app, opts) => {
  const typed = app.withTypeProvider<ZodTypeProvider>();
  typed.get('/health/live', { schema: { hide: true, response: { 200: z.object({ status: z.literal('ok') }) } } }, async () => ({
    status: 'ok' as const,
  }));

  typed.get('/health/ready', { schema: { hide: true } }, async (request, reply) => {
    const { checks, down, status } = await checkReadiness(opts.readiness);
    if (down.length > 0) {
      reply.header('retry-after', '5');
      return sendProblem(request, reply, 503, `Not ready: ${down.join(', ')} unavailable`, { checks });
    }
    return reply.send({ status, checks });
  });

  app.get('/metrics', { schema: { hide: true } }, async (_request, reply) => {
    reply.type(opts.registry.contentType);
    return opts.registry.metrics();
  });
};
