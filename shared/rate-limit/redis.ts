import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import { z } from 'zod';
import { UNITS_PER_TOKEN } from './bucket.ts';
import type { BucketDecision, BucketPolicy, RateLimitStore } from './port.ts';

/**
 * The token bucket of `bucket.ts`, as one Lua script so that read-refill-take-write is atomic
 * and every gateway sharing this Redis sees one bucket per key. The clock is Redis `TIME`, so
 * gateways with skewed clocks still agree. ARGV[1] (an explicit time in µs, or '') exists only
 * so the test suite can hold the script to the reference model; the store always passes ''.
 *
 * One call decides a whole batch: KEYS[i] with ARGV[2i] (per minute) and ARGV[2i+1] (burst),
 * in order, so a key named twice takes two tokens one after the other, exactly as two calls
 * would. The store sends every request that arrived in one event-loop turn as one call (see
 * `createRedisRateLimitStore`): a busy gateway pays one round trip per turn, not per request.
 * (All keys of one call must live on one Redis node; this store targets a single primary.)
 *
 * Why not rate-limiter-flexible (installed): its RateLimiterRedis is a fixed-window counter
 * (INCRBY + EXPIRE per `duration`), and BurstyRateLimiter stacks two such windows. Neither is a
 * token bucket with fractional refill: a fixed window lets 2× the limit through across a window
 * edge and refills in steps, not at perMinute/60 tokens per second.
 *
 * State is a hash {u: units, t: µs}; numbers are written with %.0f because Lua's tostring keeps
 * only 14 significant digits. An absent key is a full bucket, so the key expires once full.
 * The reply is flat: {allowed, remaining, reset µs, wait µs} per key.
 */
export const TOKEN_BUCKET_LUA = `
local U = ${UNITS_PER_TOKEN}
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local out = {}
for i = 1, #KEYS do
  local per_minute = tonumber(ARGV[2 * i])
  local capacity = tonumber(ARGV[2 * i + 1]) * U
  local units = capacity
  local at = now
  local held = redis.call('HMGET', KEYS[i], 'u', 't')
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
    redis.call('HSET', KEYS[i], 'u', string.format('%.0f', units), 't', string.format('%.0f', at))
    redis.call('PEXPIRE', KEYS[i], math.ceil(reset / 1000) + 1000)
  end
  out[#out + 1] = allowed
  out[#out + 1] = math.floor(units / U)
  out[#out + 1] = reset
  out[#out + 1] = wait
end
return out
`;

const SCRIPT_SHA = createHash('sha1').update(TOKEN_BUCKET_LUA).digest('hex');

const reply = z.array(z.number().int());

/** The most requests one script call decides; more wait for the next call. */
const MAX_BATCH = 512;

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

  const run = async (items: ReadonlyArray<{ readonly key: string; readonly policy: BucketPolicy }>, nowUs = ''): Promise<BucketDecision[]> => {
    const keys = items.map((item) => prefix + item.key);
    const args: Array<string | number> = [nowUs];
    for (const { policy } of items) args.push(policy.perMinute, policy.burst);
    let raw: unknown;
    try {
      raw = await client.evalsha(SCRIPT_SHA, keys.length, ...keys, ...args);
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
      raw = await client.eval(TOKEN_BUCKET_LUA, keys.length, ...keys, ...args);
    }
    const values = reply.parse(raw);
    if (values.length !== items.length * 4) throw new Error(`rate-limit script answered ${values.length} values for ${items.length} keys`);
    return items.map((_, i) => {
      const at = i * 4;
      return { allowed: values[at] === 1, remaining: values[at + 1]!, resetMs: values[at + 2]! / 1000, waitMs: values[at + 3]! / 1000 };
    });
  };

  // Requests that arrive in one event-loop turn leave together as one script call, sent from
  // setImmediate: after this turn's I/O callbacks, so no timer delays a lone request.
  type Pending = { readonly key: string; readonly policy: BucketPolicy; resolve(decision: BucketDecision): void; reject(error: unknown): void };
  const pending: Pending[] = [];
  const flush = () => {
    const batch = pending.splice(0, MAX_BATCH);
    if (pending.length > 0) setImmediate(flush);
    run(batch).then(
      (decisions) => batch.forEach((item, i) => item.resolve(decisions[i] as BucketDecision)),
      (error: unknown) => batch.forEach((item) => item.reject(error)),
    );
  };
  const decide = (key: string, policy: BucketPolicy) =>
    new Promise<BucketDecision>((resolve, reject) => {
      if (pending.push({ key, policy, resolve, reject }) === 1) setImmediate(flush);
    });

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
      const decision = await decide(key, policy);
      if (!decision.allowed) {
        if (refusals.size >= 10_000) forgetPassed(sentAt);
        refusals.set(key, { policy, sentAt, decision });
      }
      return decision;
    },
    consumeAt: async (key, policy, nowUs) => (await run([{ key, policy }], String(nowUs)))[0] as BucketDecision,
    async ping() {
      await client.ping();
    },
    async close() {
      client.disconnect();
    },
  };
}
