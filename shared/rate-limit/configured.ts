import type { Registry } from 'prom-client';
import type { Config } from '../config.ts';
import type { Logger } from '../logger.ts';
import { createRateLimiter, type RateLimiter } from './limiter.ts';
import { createMemoryRateLimitStore } from './memory.ts';

/**
 * The process's rate limiter: REDIS_URL set → buckets in Redis, shared by every gateway;
 * unset (the embedded default) → buckets in this process's memory. Never fails start-up on
 * Redis: an unreachable Redis is handled per RATE_LIMIT_FAIL_OPEN like any later outage.
 */
export async function createConfiguredRateLimiter(
  config: Pick<Config, 'REDIS_URL' | 'RATE_LIMIT_FAIL_OPEN'>,
  registry: Registry,
  logger: Logger,
): Promise<RateLimiter> {
  const store = config.REDIS_URL
    ? await import('./redis.ts').then(({ createRedisRateLimitStore }) => createRedisRateLimitStore({ url: config.REDIS_URL as string }))
    : createMemoryRateLimitStore();
  logger.info({ store: config.REDIS_URL ? 'redis' : 'memory', failOpen: config.RATE_LIMIT_FAIL_OPEN }, 'rate limiter ready');
  return createRateLimiter({ store, failOpen: config.RATE_LIMIT_FAIL_OPEN, registry, logger });
}
