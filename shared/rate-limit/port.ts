/**
 * The rate-limit port: a token bucket per key. Capacity is `burst` tokens; tokens flow back at
 * `perMinute / 60` per second (fractions included); a request takes one token or is refused.
 * Two adapters keep the bucket: Redis (shared by every gateway, `redis.ts`) and memory (the
 * embedded default, `memory.ts`); both pass test/support/contracts/rateLimitStore.ts.
 */
export type BucketPolicy = {
  /** Sustained rate, requests per minute (a positive integer). */
  readonly perMinute: number;
  /** Bucket capacity: how many requests may arrive at once (a positive integer). */
  readonly burst: number;
};

/** The same bucket size and rate (a changed plan or override is a different policy). */
export const samePolicy = (a: BucketPolicy, b: BucketPolicy) => a.perMinute === b.perMinute && a.burst === b.burst;

export type BucketDecision = {
  readonly allowed: boolean;
  /** Whole tokens left after this request. */
  readonly remaining: number;
  /** Until the bucket is full again (ms; 0 when full). */
  readonly resetMs: number;
  /** Until the next request would be accepted (ms; 0 while `remaining` ≥ 1). */
  readonly waitMs: number;
};

export interface RateLimitStore {
  /** Takes one token from `key`'s bucket if it has one. Rejects when the backing store is unreachable. */
  consume(key: string, policy: BucketPolicy): Promise<BucketDecision>;
  /** Resolves when the backing store answers (readiness); rejects at once when it does not. */
  ping(): Promise<void>;
  close(): Promise<void>;
}
