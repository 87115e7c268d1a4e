import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import { RateLimiterMemory, RateLimiterRedis, type RateLimiterAbstract } from 'rate-limiter-flexible';

/**
 * Failed logins per account (tenant + e-mail): after `limit` failures in `windowSeconds` the
 * account's logins are refused with 429 until the window ends; other accounts are unaffected.
 * Unknown accounts are counted the same way, so the throttle reveals nothing either.
 */
export type LoginThrottle = {
  /** Seconds until the account may try again, or 0 if it may try now. */
  retryAfterSeconds(account: string): Promise<number>;
  recordFailure(account: string): Promise<void>;
  reset(account: string): Promise<void>;
};

export type LoginThrottleOptions = { readonly limit?: number; readonly windowSeconds?: number; readonly keyPrefix?: string };

export const LOGIN_FAILURE_LIMIT = 5;
export const LOGIN_FAILURE_WINDOW_SECONDS = 60;

/** Shared by every gateway when REDIS_URL is set; in-process otherwise. */
export function connectLoginThrottleRedis(url: string): Redis {
  const client = new Redis(url, {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: 500,
    connectTimeout: 1_000,
    retryStrategy: (attempt) => Math.min(attempt * 100, 2_000),
    connectionName: 'eas-login-throttle',
  });
  // Failures reach the limiter as rejected commands; its in-memory insurance takes over.
  client.on('error', () => undefined);
  return client;
}

export function createLoginThrottle(redis: Redis | undefined, options: LoginThrottleOptions = {}): LoginThrottle {
  const settings = {
    points: options.limit ?? LOGIN_FAILURE_LIMIT,
    duration: options.windowSeconds ?? LOGIN_FAILURE_WINDOW_SECONDS,
    keyPrefix: options.keyPrefix ?? 'eas:login-failures',
  };
  // If Redis fails, counting continues in this process rather than failing the login.
  const limiter: RateLimiterAbstract = redis
    ? new RateLimiterRedis({ storeClient: redis, ...settings, insuranceLimiter: new RateLimiterMemory(settings) })
    : new RateLimiterMemory(settings);
  // Hashing keeps keys short and keeps e-mail addresses out of Redis.
  const key = (account: string) => createHash('sha256').update(account).digest('base64url');
  return {
    async retryAfterSeconds(account) {
      const state = await limiter.get(key(account));
      if (!state || state.consumedPoints < settings.points) return 0;
      return Math.max(1, Math.ceil(state.msBeforeNext / 1000));
    },
    async recordFailure(account) {
      // Rejects once the limit is passed; being over the limit is exactly what we record.
      await limiter.consume(key(account)).catch((rejection: unknown) => {
        if (rejection instanceof Error) throw rejection;
      });
    },
    async reset(account) {
      await limiter.delete(key(account));
    },
  };
}
