import { Counter, Gauge, type Registry } from 'prom-client';
import type { Logger } from '../logger.ts';
import type { BucketDecision, BucketPolicy, RateLimitStore } from './port.ts';

export type RateLimitOutcome =
  | { readonly kind: 'unlimited' }
  | { readonly kind: 'decided'; readonly policy: BucketPolicy; readonly decision: BucketDecision }
  /** The store did not answer; `allowed` is the configured fail-open / fail-closed choice. */
  | { readonly kind: 'unavailable'; readonly allowed: boolean };

export type RateLimiter = {
  check(key: string, policy: BucketPolicy | null): Promise<RateLimitOutcome>;
  /** The store's readiness (a Redis PING on its own fail-fast connection). */
  ping(): Promise<void>;
  close(): Promise<void>;
};

export type RateLimiterOptions = {
  readonly store: RateLimitStore;
  /** RATE_LIMIT_FAIL_OPEN: serve requests while the store is unreachable (default) or refuse them. */
  readonly failOpen: boolean;
  readonly registry: Registry;
  readonly logger: Pick<Logger, 'warn' | 'info'>;
};

const metric = <T>(registry: Registry, name: string, create: () => T): T => (registry.getSingleMetric(name) as T | undefined) ?? create();

/**
 * The store plus what to do when it fails. An outage is one incident: it is logged when it
 * starts and when it ends, not per request, and counted in /metrics; requests in between are
 * served (fail open) or refused (fail closed) without waiting on the store.
 */
export function createRateLimiter(options: RateLimiterOptions): RateLimiter {
  const { store, failOpen, registry, logger } = options;
  const incidents = metric(
    registry,
    'rate_limit_store_incidents_total',
    () =>
      new Counter({
        name: 'rate_limit_store_incidents_total',
        help: 'Times the rate-limit store became unreachable',
        registers: [registry],
      }),
  );
  const unguarded = metric(
    registry,
    'rate_limit_store_unavailable_requests_total',
    () =>
      new Counter({
        name: 'rate_limit_store_unavailable_requests_total',
        help: 'Requests decided without the rate-limit store, by outcome (fail open: allowed, fail closed: refused)',
        labelNames: ['outcome'] as const,
        registers: [registry],
      }),
  );
  const up = metric(
    registry,
    'rate_limit_store_up',
    () =>
      new Gauge({ name: 'rate_limit_store_up', help: '1 while the rate-limit store answers, 0 during an incident', registers: [registry] }),
  );
  const refused = metric(
    registry,
    'rate_limit_refused_total',
    () => new Counter({ name: 'rate_limit_refused_total', help: 'Requests refused with 429 by the rate limiter', registers: [registry] }),
  );
  up.set(1);

  let incidentSince: number | undefined;

  return {
    async check(key, policy) {
      if (!policy) return { kind: 'unlimited' };
      let decision: BucketDecision;
      try {
        decision = await store.consume(key, policy);
      } catch (error) {
        if (incidentSince === undefined) {
          incidentSince = Date.now();
          incidents.inc();
          up.set(0);
          logger.warn(
            { err: error, failOpen },
            `rate-limit store unreachable; ${failOpen ? 'serving requests without limits' : 'refusing requests'} until it answers again`,
          );
        }
        unguarded.inc({ outcome: failOpen ? 'allowed' : 'refused' });
        return { kind: 'unavailable', allowed: failOpen };
      }
      if (incidentSince !== undefined) {
        logger.info({ downMs: Date.now() - incidentSince }, 'rate-limit store answers again');
        incidentSince = undefined;
        up.set(1);
      }
      if (!decision.allowed) refused.inc();
      return { kind: 'decided', policy, decision };
    },
    ping: () => store.ping(),
    close: () => store.close(),
  };
}
