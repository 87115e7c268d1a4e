import type { BucketDecision, BucketPolicy } from './port.ts';

/**
 * Token-bucket arithmetic in exact integers, shared by the memory store and mirrored line by line
 * in the Redis Lua script (`redis.ts`). Time is in microseconds. One token is `UNITS_PER_TOKEN`
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

export function takeToken(
  state: BucketState | undefined,
  policy: BucketPolicy,
  nowUs: number,
): { state: BucketState; decision: BucketDecision } {
  const capacity = policy.burst * UNITS_PER_TOKEN;
  let units = capacity;
  let atUs = nowUs;
  if (state) {
    // A smaller policy (plan downgrade) caps what is held; a clock that steps back refills nothing.
    units = Math.min(state.units, capacity);
    atUs = Math.max(state.atUs, nowUs);
    const elapsed = Math.max(0, nowUs - state.atUs);
    const deficit = capacity - units;
    units = elapsed * policy.perMinute >= deficit ? capacity : units + elapsed * policy.perMinute;
  }
  const allowed = units >= UNITS_PER_TOKEN;
  if (allowed) units -= UNITS_PER_TOKEN;
  const waitUs = units >= UNITS_PER_TOKEN ? 0 : Math.ceil((UNITS_PER_TOKEN - units) / policy.perMinute);
  return {
    state: { units, atUs },
    decision: {
      allowed,
      remaining: Math.floor(units / UNITS_PER_TOKEN),
      resetMs: Math.ceil((capacity - units) / policy.perMinute) / 1000,
      waitMs: waitUs / 1000,
    },
  };
}
