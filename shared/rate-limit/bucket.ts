import type { BucketDecision, BucketPolicy } from './port.ts';

/**
 * Token-bucket arithmetic in exact integers, shared by both stores: the memory store runs
 * `takeToken`; the Redis store's Lua script (`redis.ts`) mirrors `refill` line by line and the
 * store runs `take` on what the script answers. Time is in microseconds. One token is `UNITS_PER_TOKEN`
 * units and the bucket gains `perMinute` units per microsecond, so a refill of perMinute/60
 * tokens per second needs no fractions: every quantity stays an integer below 2^53, where a
 * double (JavaScript and Redis Lua alike) is exact.
 */
export const UNITS_PER_TOKEN = 60_000_000; // microseconds per minute

export type BucketState = {
  /** Tokens × UNITS_PER_TOKEN held at `atUs`. */
  readonly units: number;
  readonly atUs: number;
};

/** Units held at `nowUs`: what `state` held plus what flowed back since, capped at the capacity. */
export function refill(state: BucketState | undefined, policy: BucketPolicy, nowUs: number): BucketState {
  const capacity = policy.burst * UNITS_PER_TOKEN;
  if (!state) return { units: capacity, atUs: nowUs };
  // A smaller policy (plan downgrade) caps what is held; a clock that steps back refills nothing.
  const units = Math.min(state.units, capacity);
  const elapsed = Math.max(0, nowUs - state.atUs);
  return {
    units: elapsed * policy.perMinute >= capacity - units ? capacity : units + elapsed * policy.perMinute,
    atUs: Math.max(state.atUs, nowUs),
  };
}

/** One request against a bucket holding `units` (already refilled): takes a token if there is one. */
export function take(units: number, policy: BucketPolicy): { units: number; decision: BucketDecision } {
  const allowed = units >= UNITS_PER_TOKEN;
  const after = allowed ? units - UNITS_PER_TOKEN : units;
  const waitUs = after >= UNITS_PER_TOKEN ? 0 : Math.ceil((UNITS_PER_TOKEN - after) / policy.perMinute);
  return {
    units: after,
    decision: {
      allowed,
      remaining: Math.floor(after / UNITS_PER_TOKEN),
      resetMs: Math.ceil((policy.burst * UNITS_PER_TOKEN - after) / policy.perMinute) / 1000,
      waitMs: waitUs / 1000,
    },
  };
}

/**
 * `count` requests one after the other against a bucket holding `units` (already refilled): each
 * request's decision, as `take` gives it on what the one before it left.
 */
export function takeEach(units: number, policy: BucketPolicy, count: number): BucketDecision[] {
  const decisions: BucketDecision[] = [];
  for (let left = units, i = 0; i < count; i++) {
    const step = take(left, policy);
    left = step.units;
    decisions.push(step.decision);
  }
  return decisions;
}

/**
 * Leases (the Redis store, `redis.ts`): after a batch's `count` takes, a gateway may also take
 * up to `wanted` tokens to spend locally, but never more than 1/LEASE_SHARE of the whole tokens
 * the bucket still holds, so leases shrink to nothing as a bucket runs out. The Lua script
 * computes the same grant from the same integers.
 */
export const LEASE_SHARE = 32;

/** Whole tokens in `units`, corrected where the division alone could round up. */
export const wholeTokens = (units: number): number => {
  const tokens = Math.floor(units / UNITS_PER_TOKEN);
  return tokens * UNITS_PER_TOKEN > units ? tokens - 1 : tokens;
};

/** The tokens leased from a bucket that held `units` before `count` takes, for `wanted` asked. */
export function leaseOf(units: number, count: number, wanted: number): number {
  if (wanted <= 0) return 0;
  const tokens = wholeTokens(units);
  return Math.min(wanted, Math.floor((tokens - Math.min(count, tokens)) / LEASE_SHARE));
}

export function takeToken(
  state: BucketState | undefined,
  policy: BucketPolicy,
  nowUs: number,
): { state: BucketState; decision: BucketDecision } {
  const held = refill(state, policy, nowUs);
  const { units, decision } = take(held.units, policy);
  return { state: { units, atUs: held.atUs }, decision };
}
