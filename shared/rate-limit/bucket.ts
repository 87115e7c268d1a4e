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
  return { units: elapsed * policy.perMinute >= capacity - units ? capacity : units + elapsed * policy.perMinute, atUs: Math.max(state.atUs, nowUs) };
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

export function takeToken(
  state: BucketState | undefined,
  policy: BucketPolicy,
  nowUs: number,
): { state: BucketState; decision: BucketDecision } {
  const held = refill(state, policy, nowUs);
  const { units, decision } = take(held.units, policy);
  return { state: { units, atUs: held.atUs }, decision };
}
