import { takeToken, type BucketState } from './bucket.ts';
import type { RateLimitStore } from './port.ts';

export type MemoryRateLimitStoreOptions = {
  /** Wall clock in milliseconds (may be fractional); injected by tests. */
  readonly now?: () => number;
  /** Sweep buckets that have refilled completely once this many keys are held. */
  readonly sweepAbove?: number;
};

type Entry = { state: BucketState; fullAtUs: number };

/**
 * The embedded default: the same bucket arithmetic as Redis, in this process only. Correct for
 * one gateway; several gateways need the Redis store to share one bucket per tenant.
 */
export function createMemoryRateLimitStore(options: MemoryRateLimitStoreOptions = {}): RateLimitStore {
  const now = options.now ?? (() => performance.timeOrigin + performance.now());
  const buckets = new Map<string, Entry>();
  let sweepAbove = options.sweepAbove ?? 10_000;

  // A full bucket is the same as no bucket, so forgetting refilled ones changes no decision.
  // The threshold doubles with what survives a sweep, so sweeping stays amortised O(1).
  const sweep = (nowUs: number) => {
    for (const [key, entry] of buckets) if (entry.fullAtUs <= nowUs) buckets.delete(key);
    sweepAbove = Math.max(options.sweepAbove ?? 10_000, buckets.size * 2);
  };

  return {
    async consume(key, policy) {
      const nowUs = Math.round(now() * 1000);
      if (buckets.size >= sweepAbove) sweep(nowUs);
      const { state, decision } = takeToken(buckets.get(key)?.state, policy, nowUs);
      buckets.set(key, { state, fullAtUs: state.atUs + Math.ceil(decision.resetMs * 1000) });
      return decision;
    },
    async ping() {},
    async close() {
      buckets.clear();
    },
  };
}
