import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import { z } from 'zod';
import { UNITS_PER_TOKEN } from './bucket.ts';
import type { BucketDecision, BucketPolicy, RateLimitStore } from './port.ts';

/**
 * The token bucket of `bucket.ts`, as one Lua script so that read-refill-take-write is atomic
 * and every gateway sharing this Redis sees one bucket per key. The clock is Redis `TIME`, so
 * gateways with skewed clocks still agree. ARGV[3] (an explicit time in µs) exists only so the
 * test suite can hold the script to the reference model; the store never passes it.
 *
 * Why not rate-limiter-flexible (installed): its RateLimiterRedis is a fixed-window counter
 * (INCRBY + EXPIRE per `duration`), and BurstyRateLimiter stacks two such windows. Neither is a
 * token bucket with fractional refill: a fixed window lets 2× the limit through across a window
 * edge and refills in steps, not at perMinute/60 tokens per second.
 *
 * State is a hash {u: units, t: µs}; numbers are written with %.0f because Lua's tostring keeps
 * only 14 significant digits. An absent key is a full bucket, so the key expires once full.
 */
export const TOKEN_BUCKET_LUA = `
local U = ${UNITS_PER_TOKEN}
local per_minute = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2]) * U
local now
if ARGV[3] then
  now = tonumber(ARGV[3])
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local units = capacity
local at = now
local held = redis.call('HMGET', KEYS[1], 'u', 't')
if held[1] and held[2] then
  local held_at = tonumber(held[2])
  units = math.min(tonumber(held[1]), capacity)
  at = math.max(held_at, now)
  local elapsed = math.max(0, now - held_at)
  if elapsed * per_minute >= capacity - units then
    units = capacity
  else
    units = units + elapsed * per_minute
  end
end
local allowed = 0
if units >= U then
  allowed = 1
  units = units - U
end
local wait = 0
if units < U then wait = math.ceil((U - units) / per_minute) end
local reset = math.ceil((capacity - units) / per_minute)
if allowed == 1 then
  redis.call('HSET', KEYS[1], 'u', string.format('%.0f', units), 't', string.format('%.0f', at))
  redis.call('PEXPIRE', KEYS[1], math.ceil(reset / 1000) + 1000)
end
return {allowed, math.floor(units / U), reset, wait}
`;

const SCRIPT_SHA = createHash('sha1').update(TOKEN_BUCKET_LUA).digest('hex');

const reply = z.tuple([z.union([z.literal(0), z.literal(1)]), z.number().int(), z.number().int(), z.number().int()]);

export type RedisRateLimitStoreOptions = {
  readonly url: string;
  /** Prepended to every key (tests use a fresh one each). */
  readonly prefix?: string;
  /** A command slower than this fails, so a request never hangs on Redis. */
  readonly commandTimeoutMs?: number;
  /** How long creation waits for the first connection before returning anyway. */
  readonly connectTimeoutMs?: number;
};

export type RedisRateLimitStore = RateLimitStore & {
  /** For tests only: one bucket step at an explicit time (µs) instead of Redis TIME. */
  consumeAt(key: string, policy: BucketPolicy, nowUs: number): Promise<BucketDecision>;
  readonly client: Redis;
};

/**
 * Owns its own connection, tuned to fail fast: no offline queue (a command while disconnected
 * rejects at once), no per-command retries, a short command timeout. ioredis keeps reconnecting
 * in the background; the caller decides what a failure means (see limiter.ts).
 */
export async function createRedisRateLimitStore(options: RedisRateLimitStoreOptions): Promise<RedisRateLimitStore> {
  const prefix = options.prefix ?? 'eas:rl:';
  const client = new Redis(options.url, {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: options.commandTimeoutMs ?? 500,
    connectTimeout: options.connectTimeoutMs ?? 1_000,
    retryStrategy: (attempt) => Math.min(attempt * 100, 2_000),
    connectionName: 'eas-rate-limit',
  });
  // Failures reach callers as rejected commands; the limiter logs them once per incident.
  client.on('error', () => undefined);
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, options.connectTimeoutMs ?? 1_000);
    client.once('ready', () => {
      clearTimeout(timer);
      resolve();
    });
  });

  const run = async (key: string, args: Array<string | number>) => {
    const fullKey = prefix + key;
    let raw: unknown;
    try {
      raw = await client.evalsha(SCRIPT_SHA, 1, fullKey, ...args);
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
      raw = await client.eval(TOKEN_BUCKET_LUA, 1, fullKey, ...args);
    }
    const [allowed, remaining, resetUs, waitUs] = reply.parse(raw);
    return { allowed: allowed === 1, remaining, resetMs: resetUs / 1000, waitMs: waitUs / 1000 };
  };

  // A refusal holds until its wait has passed: tokens only flow back with time, and other
  // gateways can only take them, so until then Redis would refuse too. Answering locally keeps
  // a tenant that hammers past its limit from costing a Redis round trip per request. The
  // wait is counted from before the command was sent, never from the reply, so it is never
  // longer than Redis's own; a different policy (plan change) goes to Redis.
  const refusals = new Map<string, { readonly policy: BucketPolicy; readonly sentAt: number; readonly decision: BucketDecision }>();
  const forgetPassed = (now: number) => {
    for (const [key, refusal] of refusals) if (now - refusal.sentAt >= refusal.decision.waitMs) refusals.delete(key);
  };

  return {
    client,
    async consume(key, policy) {
      const sentAt = performance.now();
      const refusal = refusals.get(key);
      if (refusal) {
        const elapsed = sentAt - refusal.sentAt;
        const same = refusal.policy.perMinute === policy.perMinute && refusal.policy.burst === policy.burst;
        if (same && elapsed < refusal.decision.waitMs) {
          return { allowed: false, remaining: 0, waitMs: refusal.decision.waitMs - elapsed, resetMs: refusal.decision.resetMs - elapsed };
        }
        refusals.delete(key);
      }
      const decision = await run(key, [policy.perMinute, policy.burst]);
      if (!decision.allowed) {
        if (refusals.size >= 10_000) forgetPassed(sentAt);
        refusals.set(key, { policy, sentAt, decision });
      }
      return decision;
    },
    consumeAt: (key, policy, nowUs) => run(key, [policy.perMinute, policy.burst, nowUs]),
    async ping() {
      await client.ping();
    },
    async close() {
      client.disconnect();
    },
  };
}
