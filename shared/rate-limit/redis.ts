import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import { z } from 'zod';
import { leaseOf, refill, take, takeEach, UNITS_PER_TOKEN, wholeTokens } from './bucket.ts';
import { samePolicy, type BucketDecision, type BucketPolicy, type RateLimitStore } from './port.ts';
import { TOKEN_BUCKET_LUA } from './tokenBucketScript.ts';

const SCRIPT_SHA = createHash('sha1').update(TOKEN_BUCKET_LUA).digest('hex');

const reply = z.array(z.number().int());

/** The most requests one script call decides; more wait for the next call. */
const MAX_BATCH = 512;

/**
 * Leases. A gateway that is busy with one big bucket takes a few of its tokens ahead and spends
 * them without a round trip: at most MAX_LEASE, at most 1/LEASE_SHARE of what the bucket holds
 * after the batch's own takes (bucket.ts), about half a DEMAND_WINDOW_MS of this gateway's recent
 * requests for that key, and only for buckets of at least LEASE_MIN_BURST tokens (every plan's
 * bucket is smaller and stays exact to the token). A lease is spent for LEASE_MS from before its
 * call was sent; what is left then goes back to the bucket in the next call. The tokens were
 * taken from the shared bucket before any of them is spent, so gateways together never hand out
 * more than it holds, except for the refill a full bucket could not take while leased tokens were
 * out of it: in any window, at most the tokens leased out when it began (one lease per gateway
 * and key), and only while the bucket is near full, that is while the tenant is far from its
 * limit. Until a lease is spent or given back, other gateways may refuse requests the leased
 * tokens would have covered; leases shrink with the bucket, so near exhaustion (under
 * LEASE_SHARE tokens) every request goes to Redis again.
 */
const LEASE_MIN_BURST = 1_000;
const MAX_LEASE = 256;
const LEASE_MS = 100;
const DEMAND_WINDOW_MS = 50;

/** How long a gateway answers a refused bucket's requests itself (see `refusals` below). */
const refusalHoldMs = (policy: BucketPolicy, refused: BucketDecision) =>
  policy.burst >= LEASE_MIN_BURST ? Math.min(refused.waitMs, LEASE_MS) : refused.waitMs;

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

  /** One script call: each entry's bucket after refilling at `now`, before its `count` takes (and lease). */
  const run = async (
    entries: ReadonlyArray<{ readonly key: string; readonly policy: BucketPolicy; readonly count: number; readonly lease?: number }>,
    nowUs = '',
  ): Promise<number[]> => {
    const args: Array<string | number> = [];
    for (const { key } of entries) args.push(prefix + key);
    args.push(nowUs);
    for (const { policy, count, lease } of entries) args.push(policy.perMinute, policy.burst, count, lease ?? 0);
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
  // gateways can only take them, so until then Redis would refuse too (a bucket big enough for
  // leases can also get leased tokens back, within LEASE_MS: its refusals hold no longer).
  // Answering locally keeps a tenant that hammers past its limit from costing a Redis round trip
  // per request. The wait is counted from before the command was sent, never from the reply, so
  // it is never longer than Redis's own; a different policy (plan change) goes to Redis.
  const refusals = new Map<string, { readonly policy: BucketPolicy; readonly sentAt: number; readonly decision: BucketDecision }>();
  const forgetPassed = (now: number) => {
    for (const [key, refusal] of refusals)
      if (now - refusal.sentAt >= refusalHoldMs(refusal.policy, refusal.decision)) refusals.delete(key);
  };

  // Requests leave in batches, one script call at a time, as in group commit: a request that
  // finds no call in flight is sent from setImmediate (after this turn's I/O callbacks, so no
  // timer delays a lone request); requests that arrive while a call is in flight wait for its
  // answer and leave together in the next. A busy gateway thus pays one round trip per Redis
  // answer, however many requests arrived meanwhile, and never more than one call's latency
  // of waiting. Within a batch, the requests for one key (and policy) become one entry with a
  // count. A give-back (a lease's unspent tokens) is an entry of its own, with no requests.
  type Pending = {
    readonly key: string;
    readonly policy: BucketPolicy;
    /** Leased tokens to return: a give-back, not a request. */
    readonly giveBack?: number;
    resolve(decision: BucketDecision): void;
    reject(error: unknown): void;
  };
  type Entry = {
    readonly key: string;
    readonly policy: BucketPolicy;
    readonly requests: Pending[];
    readonly giveBack: number;
    lease: number;
  };
  const pending: Pending[] = [];
  let inFlight = false;
  const enqueue = (request: Pending) => {
    if (pending.push(request) === 1 && !inFlight) setImmediate(flush);
  };

  // Demand per key in the current and the previous window, for the size of a lease.
  const demand = new Map<string, { start: number; count: number; previous: number }>();
  const noteDemand = (key: string, now: number) => {
    const seen = demand.get(key);
    if (!seen) {
      if (demand.size >= 10_000) for (const [k, d] of demand) if (now - d.start >= 2 * DEMAND_WINDOW_MS) demand.delete(k);
      demand.set(key, { start: now, count: 1, previous: 0 });
    } else if (now - seen.start >= DEMAND_WINDOW_MS) {
      seen.previous = now - seen.start < 2 * DEMAND_WINDOW_MS ? seen.count : 0;
      seen.start = now;
      seen.count = 1;
    } else seen.count++;
  };
  const wanted = (key: string, policy: BucketPolicy): number => {
    const seen = demand.get(key);
    if (policy.burst < LEASE_MIN_BURST || !seen) return 0;
    const lease = Math.min(MAX_LEASE, Math.floor(Math.max(seen.count, seen.previous) / 2));
    return lease >= 2 ? lease : 0;
  };

  type Lease = {
    readonly policy: BucketPolicy;
    tokens: number;
    /** What Redis held after the call that granted the lease, and when that call was sent. */
    readonly redisUnits: number;
    readonly sentAt: number;
  };
  const leases = new Map<string, Lease>();
  let sweep: NodeJS.Timeout | undefined;
  /** Ends a lease; its unspent tokens go back in the next call (into `batch` when one is being built). */
  const giveBack = (key: string, lease: Lease, batch?: Pending[]) => {
    leases.delete(key);
    if (lease.tokens === 0) return;
    const returned = { key, policy: lease.policy, giveBack: lease.tokens, resolve: () => undefined, reject: () => undefined };
    if (batch) batch.push(returned);
    else enqueue(returned);
  };
  // One timer, set for the oldest lease's end (leases end in the order they were granted).
  const sweepLeases = () => {
    sweep = undefined;
    const now = performance.now();
    for (const [key, lease] of leases) if (now - lease.sentAt >= LEASE_MS) giveBack(key, lease);
    armSweep();
  };
  const armSweep = () => {
    if (sweep || leases.size === 0) return;
    let oldest = Infinity;
    for (const lease of leases.values()) oldest = Math.min(oldest, lease.sentAt);
    sweep = setTimeout(sweepLeases, Math.max(0, oldest + LEASE_MS - performance.now())).unref();
  };
  /** One request answered from the key's lease, or undefined when it has none to spend. */
  const spend = (key: string, policy: BucketPolicy, now: number, batch?: Pending[]): BucketDecision | undefined => {
    const lease = leases.get(key);
    if (!lease) return undefined;
    if (!samePolicy(lease.policy, policy) || now - lease.sentAt >= LEASE_MS) {
      giveBack(key, lease, batch);
      return undefined;
    }
    // The decision's `remaining` and times are this gateway's estimate: what Redis held after
    // the lease, refilled since, plus the tokens still leased (other gateways' takes unseen).
    const redisNow = refill({ units: lease.redisUnits, atUs: 0 }, policy, Math.floor((now - lease.sentAt) * 1000)).units; // µs since the call
    const held = Math.min(policy.burst * UNITS_PER_TOKEN, redisNow + lease.tokens * UNITS_PER_TOKEN);
    if (--lease.tokens === 0) leases.delete(key);
    return take(held, policy).decision;
  };

  const settle = (entries: readonly Entry[], sentAt: number, held: readonly number[]) => {
    entries.forEach((entry, i) => {
      if (entry.giveBack > 0) return;
      const units = held[i] as number;
      takeEach(units, entry.policy, entry.requests.length).forEach((decision, j) => {
        if (!decision.allowed) {
          if (refusals.size >= 10_000) forgetPassed(sentAt);
          refusals.set(entry.key, { policy: entry.policy, sentAt, decision });
        }
        entry.requests[j]?.resolve(decision);
      });
      const leased = leaseOf(units, entry.requests.length, entry.lease);
      if (leased > 0) {
        const taken = Math.min(entry.requests.length, wholeTokens(units)) + leased;
        // (No live lease can be replaced here: a key goes to Redis only once its lease is spent or ended.)
        leases.set(entry.key, { policy: entry.policy, tokens: leased, redisUnits: units - taken * UNITS_PER_TOKEN, sentAt });
        armSweep();
      }
    });
  };
  const flush = () => {
    // Requests that queued while the last call was out may find the lease it brought.
    const now = performance.now();
    const batch: Pending[] = [];
    let drained = 0;
    for (; drained < pending.length && batch.length < MAX_BATCH; drained++) {
      const request = pending[drained] as Pending;
      const local = request.giveBack === undefined ? spend(request.key, request.policy, now, batch) : undefined;
      if (local) request.resolve(local);
      else batch.push(request);
    }
    pending.splice(0, drained);
    if (batch.length === 0) return;
    const entries: Entry[] = [];
    const last = new Map<string, Entry>();
    for (const request of batch) {
      const entry = last.get(request.key);
      if (entry && entry.giveBack === 0 && request.giveBack === undefined && samePolicy(entry.policy, request.policy)) {
        entry.requests.push(request);
        continue;
      }
      const created: Entry = request.giveBack
        ? { key: request.key, policy: request.policy, requests: [], giveBack: request.giveBack, lease: 0 }
        : { key: request.key, policy: request.policy, requests: [request], giveBack: 0, lease: 0 };
      entries.push(created);
      last.set(request.key, created);
    }
    // A key's last entry in the call asks for its lease, if any.
    for (const [key, entry] of last) if (entry.giveBack === 0) entry.lease = wanted(key, entry.policy);
    const sentAt = performance.now();
    inFlight = true;
    const fail = (error: unknown) => {
      // The requests that queued behind a failed call fail with it, rather than wait for a call
      // of their own to time out too: a hung Redis costs a request one command timeout, not two.
      // Give-backs not yet sent stay queued; one in the failed call is not sent again (Redis may
      // have run it before the failure reached us), so its tokens stay out until they flow back.
      const queued = pending.splice(0);
      pending.push(...queued.filter((request) => request.giveBack !== undefined));
      for (const request of [...batch, ...queued]) request.reject(error); // no-op for those already settled and for give-backs
    };
    run(
      entries.map(({ key, policy, requests, giveBack: returned, lease }) => ({
        key,
        policy,
        count: returned > 0 ? -returned : requests.length,
        lease,
      })),
    )
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
      const now = performance.now();
      const refusal = refusals.get(key);
      if (refusal) {
        const elapsed = now - refusal.sentAt;
        if (samePolicy(refusal.policy, policy) && elapsed < refusalHoldMs(policy, refusal.decision)) {
          return Promise.resolve({
            allowed: false,
            remaining: 0,
            waitMs: refusal.decision.waitMs - elapsed,
            resetMs: refusal.decision.resetMs - elapsed,
          });
        }
        refusals.delete(key);
      }
      if (policy.burst >= LEASE_MIN_BURST) noteDemand(key, now);
      const local = spend(key, policy, now);
      if (local) return Promise.resolve(local);
      return new Promise<BucketDecision>((resolve, reject) => enqueue({ key, policy, resolve, reject }));
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
      // Tokens still leased are not given back: they flow back into the bucket with time.
      if (sweep) clearTimeout(sweep);
      client.disconnect();
    },
  };
}
