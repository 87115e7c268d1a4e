import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import { z } from 'zod';
import { take, takeEach, UNITS_PER_TOKEN } from './bucket.ts';
import { samePolicy, type BucketDecision, type BucketPolicy, type RateLimitStore } from './port.ts';

/**
 * The refill of `bucket.ts`, as one Lua script, so that read-refill-take-write is atomic and
 * every gateway sharing this Redis sees one bucket per key. The clock is Redis `TIME`, so
 * gateways with skewed clocks still agree. ARGV[1] (an explicit time in µs, or '') exists only
 * so the test suite can hold the script to the reference model; the store always passes ''.
 *
 * One call decides a whole batch: KEYS[i] with ARGV[3i-1] (per minute), ARGV[3i] (burst) and
 * ARGV[3i+1] (how many requests take a token from it, one after the other). The script answers,
 * per key, the units the bucket held after refilling at `now`, before those requests; it takes
 * as many tokens as there are (at most the count) and writes what is left. The store replays
 * the same takes with `take` (bucket.ts) to give each request its own decision: identical to
 * one call per request at the same `now`, but Redis runs one read and one write per key, not
 * per request, and answers one integer per key. A key may appear more than once (a policy
 * change within one batch): entries run in order. The store has one call in flight at a time
 * and sends every request that arrived meanwhile as the next (see `createRedisRateLimitStore`):
 * a busy gateway pays one round trip per Redis answer, not per request. (All keys of one call
 * must live on one Redis node; this store targets a single primary.)
 *
 * Why not rate-limiter-flexible (installed): its RateLimiterRedis is a fixed-window counter
 * (INCRBY + EXPIRE per `duration`), and BurstyRateLimiter stacks two such windows. Neither is a
 * token bucket with fractional refill: a fixed window lets 2× the limit through across a window
 * edge and refills in steps, not at perMinute/60 tokens per second.
 *
 * State is a hash {u: units, t: µs}; numbers are written with %.0f because Lua's tostring keeps
 * only 14 significant digits. An absent key is a full bucket, so the key expires once full.
 * Every quantity is an integer below 2^53 (policy.ts MAX_OVERRIDE), so Lua's doubles are exact;
 * the whole-token count is corrected after the division, which alone could round up.
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
  local per_minute = tonumber(ARGV[3 * i - 1])
  local capacity = tonumber(ARGV[3 * i]) * U
  local count = tonumber(ARGV[3 * i + 1])
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
  local tokens = math.floor(units / U)
  if tokens * U > units then tokens = tokens - 1 end
  local taken = math.min(count, tokens)
  if taken > 0 then
    local left = units - taken * U
    redis.call('HSET', KEYS[i], 'u', string.format('%.0f', left), 't', string.format('%.0f', at))
    redis.call('PEXPIRE', KEYS[i], math.ceil(math.ceil((capacity - left) / per_minute) / 1000) + 1000)
  end
  out[i] = units
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
  /** For tests only: `count` requests for one key in one script call at an explicit time (µs). */
  consumeManyAt(key: string, policy: BucketPolicy, nowUs: number, count: number): Promise<BucketDecision[]>;
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

  /** One script call: each entry's bucket after refilling at `now`, before its `count` takes. */
  const run = async (entries: ReadonlyArray<{ readonly key: string; readonly policy: BucketPolicy; readonly count: number }>, nowUs = ''): Promise<number[]> => {
    const args: Array<string | number> = [];
    for (const { key } of entries) args.push(prefix + key);
    args.push(nowUs);
    for (const { policy, count } of entries) args.push(policy.perMinute, policy.burst, count);
    let raw: unknown;
    try {
      raw = await client.evalsha(SCRIPT_SHA, entries.length, ...args);
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
      raw = await client.eval(TOKEN_BUCKET_LUA, entries.length, ...args);
    }
    const held = reply.parse(raw);
    if (held.length !== entries.length) throw new Error(`rate-limit script answered ${held.length} values for ${entries.length} keys`);
    return held;
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

  // Requests leave in batches, one script call at a time, as in group commit: a request that
  // finds no call in flight is sent from setImmediate (after this turn's I/O callbacks, so no
  // timer delays a lone request); requests that arrive while a call is in flight wait for its
  // answer and leave together in the next. A busy gateway thus pays one round trip per Redis
  // answer, however many requests arrived meanwhile, and never more than one call's latency
  // of waiting. Within a batch, the requests for one key (and policy) become one entry with a
  // count.
  type Pending = { readonly key: string; readonly policy: BucketPolicy; resolve(decision: BucketDecision): void; reject(error: unknown): void };
  type Entry = { readonly key: string; readonly policy: BucketPolicy; readonly requests: Pending[] };
  const pending: Pending[] = [];
  let inFlight = false;
  const settle = (entries: readonly Entry[], sentAt: number, held: readonly number[]) => {
    entries.forEach((entry, i) => {
      takeEach(held[i] as number, entry.policy, entry.requests.length).forEach((decision, j) => {
        if (!decision.allowed) {
          if (refusals.size >= 10_000) forgetPassed(sentAt);
          refusals.set(entry.key, { policy: entry.policy, sentAt, decision });
        }
        entry.requests[j]?.resolve(decision);
      });
    });
  };
  const flush = () => {
    const batch = pending.splice(0, MAX_BATCH);
    const entries: Entry[] = [];
    const last = new Map<string, Entry>();
    for (const request of batch) {
      const entry = last.get(request.key);
      if (entry && samePolicy(entry.policy, request.policy)) {
        entry.requests.push(request);
        continue;
      }
      const created = { key: request.key, policy: request.policy, requests: [request] };
      entries.push(created);
      last.set(request.key, created);
    }
    const sentAt = performance.now();
    inFlight = true;
    const fail = (error: unknown) => {
      // The requests that queued behind a failed call fail with it, rather than wait for a call
      // of their own to time out too: a hung Redis costs a request one command timeout, not two.
      for (const request of [...batch, ...pending.splice(0)]) request.reject(error); // no-op for those already settled
    };
    run(entries.map(({ key, policy, requests }) => ({ key, policy, count: requests.length })))
      .then((held) => settle(entries, sentAt, held))
      .catch(fail)
      .finally(() => {
        inFlight = false;
        if (pending.length > 0) setImmediate(flush);
      });
  };

  return {
    client,
    consume(key, policy) {
      const refusal = refusals.get(key);
      if (refusal) {
        const elapsed = performance.now() - refusal.sentAt;
        if (samePolicy(refusal.policy, policy) && elapsed < refusal.decision.waitMs) {
          return Promise.resolve({ allowed: false, remaining: 0, waitMs: refusal.decision.waitMs - elapsed, resetMs: refusal.decision.resetMs - elapsed });
        }
        refusals.delete(key);
      }
      return new Promise<BucketDecision>((resolve, reject) => {
        if (pending.push({ key, policy, resolve, reject }) === 1 && !inFlight) setImmediate(flush);
      });
    },
    async consumeAt(key, policy, nowUs) {
      const [held] = await run([{ key, policy, count: 1 }], String(nowUs));
      return take(held as number, policy).decision;
    },
    async consumeManyAt(key, policy, nowUs, count) {
      const [held] = await run([{ key, policy, count }], String(nowUs));
      return takeEach(held as number, policy, count);
    },
    async ping() {
      await client.ping();
    },
    async close() {
      client.disconnect();
    },
  };
}
