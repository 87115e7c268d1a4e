import { createHmac, createSecretKey, hkdfSync, type KeyObject } from 'node:crypto';
import type { Redis } from 'ioredis';
import { RateLimiterMemory, RateLimiterRedis, type RateLimiterAbstract } from 'rate-limiter-flexible';

/**
 * Failed-attempt counters for login and refresh. Three of them, so that an
 * outsider cannot lock an account at will while a guesser is still bounded:
 * - per (account, client IP): `limit` failures in `windowSeconds` (5 a minute) refuse that
 *   account *from that address* with 429; the owner elsewhere is unaffected;
 * - per account (tenant + normalised e-mail), from everywhere: `accountLimit` failures in
 *   `accountWindowSeconds` (100 in 15 minutes) — far more than one address may try, so only a
 *   guesser spread over 20+ addresses reaches it, and it still caps the guesses per account;
 * - per client IP, over every account and refresh tokens: `ipLimit` failures in `ipWindowSeconds`
 *   (40 a minute): one address cannot spray many accounts.
 * Unknown accounts are counted the same way, so the throttle reveals nothing either. A
 * successful login clears that account's counters (not the address's: a guesser must not be able
 * to reset its own budget by logging into an account of its own).
 */
export type LoginAttempt = { readonly account: string; readonly ip: string };

export type LoginThrottle = {
  /** Seconds until this attempt may be made, or 0 if it may be made now. */
  retryAfterSeconds(attempt: LoginAttempt): Promise<number>;
  recordFailure(attempt: LoginAttempt): Promise<void>;
  reset(attempt: LoginAttempt): Promise<void>;
  /** The per-address counter alone (refresh: no account is named). */
  ipRetryAfterSeconds(ip: string): Promise<number>;
  recordIpFailure(ip: string): Promise<void>;
};

export type LoginThrottleOptions = {
  readonly limit?: number;
  readonly windowSeconds?: number;
  readonly accountLimit?: number;
  readonly accountWindowSeconds?: number;
  readonly ipLimit?: number;
  readonly ipWindowSeconds?: number;
  readonly keyPrefix?: string;
};

export const LOGIN_FAILURE_LIMIT = 5;
export const LOGIN_FAILURE_WINDOW_SECONDS = 60;
export const ACCOUNT_FAILURE_LIMIT = 100;
export const ACCOUNT_FAILURE_WINDOW_SECONDS = 15 * 60;
export const IP_FAILURE_LIMIT = 40;
export const IP_FAILURE_WINDOW_SECONDS = 60;

/** Shared by every gateway when REDIS_URL is set; in-process otherwise (ioredis is then never loaded). */
export async function connectLoginThrottleRedis(url: string): Promise<Redis> {
  const { Redis } = await import('ioredis');
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

type Counter = { readonly limiter: RateLimiterAbstract; readonly points: number };

function counter(redis: Redis | undefined, settings: { points: number; duration: number; keyPrefix: string }): Counter {
  // If Redis fails, counting continues in this process rather than failing the login.
  const limiter: RateLimiterAbstract = redis
    ? new RateLimiterRedis({ storeClient: redis, ...settings, insuranceLimiter: new RateLimiterMemory(settings) })
    : new RateLimiterMemory(settings);
  return { limiter, points: settings.points };
}

/**
 * The counters' names: a keyed hash (HMAC-SHA256) of the account and the address, so that Redis,
 * its dumps and the trace spans of its commands hold neither, and a plain hash of likely
 * addresses finds neither. The key is derived from the e-mail hash key (`emailHashKey`): shared
 * by every process already, nothing new to back up, and distinct from it, so a counter's name
 * never equals a reservation stream's hash.
 */
const namer = (emailHashKey: Buffer): ((...parts: string[]) => string) => {
  const key: KeyObject = createSecretKey(Buffer.from(hkdfSync('sha256', emailHashKey, '', 'eas login throttle counters', 32)));
  return (...parts) => createHmac('sha256', key).update(parts.join('\n')).digest('base64url');
};

async function retryAfter(c: Counter, key: string): Promise<number> {
  const state = await c.limiter.get(key);
  if (!state || state.consumedPoints < c.points) return 0;
  return Math.max(1, Math.ceil(state.msBeforeNext / 1000));
}

async function consume(c: Counter, key: string): Promise<void> {
  // Rejects once the limit is passed; being over the limit is exactly what we record.
  await c.limiter.consume(key).catch((rejection: unknown) => {
    if (rejection instanceof Error) throw rejection;
  });
}

export function createLoginThrottle(redis: Redis | undefined, emailHashKey: Buffer, options: LoginThrottleOptions = {}): LoginThrottle {
  const hashed = namer(emailHashKey);
  const prefix = options.keyPrefix ?? 'eas:login-failures';
  const pair = counter(redis, {
    points: options.limit ?? LOGIN_FAILURE_LIMIT,
    duration: options.windowSeconds ?? LOGIN_FAILURE_WINDOW_SECONDS,
    keyPrefix: `${prefix}:pair`,
  });
  const account = counter(redis, {
    points: options.accountLimit ?? ACCOUNT_FAILURE_LIMIT,
    duration: options.accountWindowSeconds ?? ACCOUNT_FAILURE_WINDOW_SECONDS,
    keyPrefix: `${prefix}:account`,
  });
  const ip = counter(redis, {
    points: options.ipLimit ?? IP_FAILURE_LIMIT,
    duration: options.ipWindowSeconds ?? IP_FAILURE_WINDOW_SECONDS,
    keyPrefix: `${prefix}:ip`,
  });
  return {
    async retryAfterSeconds(attempt) {
      const waits = await Promise.all([
        retryAfter(pair, hashed(attempt.account, attempt.ip)),
        retryAfter(account, hashed(attempt.account)),
        retryAfter(ip, hashed(attempt.ip)),
      ]);
      return Math.max(...waits);
    },
    async recordFailure(attempt) {
      await Promise.all([
        consume(pair, hashed(attempt.account, attempt.ip)),
        consume(account, hashed(attempt.account)),
        consume(ip, hashed(attempt.ip)),
      ]);
    },
    async reset(attempt) {
      await Promise.all([pair.limiter.delete(hashed(attempt.account, attempt.ip)), account.limiter.delete(hashed(attempt.account))]);
    },
    ipRetryAfterSeconds: (address) => retryAfter(ip, hashed(address)),
    recordIpFailure: (address) => consume(ip, hashed(address)),
  };
}
