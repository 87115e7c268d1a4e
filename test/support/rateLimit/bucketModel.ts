import fc from 'fast-check';
import { resolvePolicy, type TenantLimits } from '../../../shared/rate-limit/policy.ts';
import type { BucketPolicy } from '../../../shared/rate-limit/port.ts';

/**
 * Reference model, written from the definition rather than from the implementation: a bucket of
 * capacity B refilled at rate ρ accepts a request at t iff, after it, every interval [a, t]
 * that starts at an accepted request holds at most B + ρ·(t − a) accepted requests (the
 * (B, ρ) arrival curve). Equivalently the level before t is
 *   min(B, min over accepted a_i of B + ρ·(t − a_i) − #accepted since a_i).
 * All in exact integers: µs, and 60,000,000 units per token (ρ = perMinute units per µs).
 */
const U = 60_000_000;

export function referenceModel(policy: BucketPolicy, timesUs: readonly number[]) {
  const accepted: number[] = [];
  return timesUs.map((t) => {
    let level = policy.burst * U;
    accepted.forEach((a, i) => {
      level = Math.min(level, policy.burst * U + policy.perMinute * (t - a) - (accepted.length - i) * U);
    });
    const allowed = level >= U;
    if (allowed) {
      accepted.push(t);
      level -= U;
    }
    return {
      allowed,
      remaining: Math.floor(level / U),
      waitMs: level >= U ? 0 : Math.ceil((U - level) / policy.perMinute) / 1000,
      resetMs: Math.ceil((policy.burst * U - level) / policy.perMinute) / 1000,
    };
  });
}

export const tenant: fc.Arbitrary<TenantLimits> = fc.record({
  plan: fc.constantFrom('starter', 'pro', 'enterprise'),
  rateLimitOverride: fc.option(fc.record({ perMinute: fc.integer({ min: 1, max: 5_000 }), burst: fc.integer({ min: 1, max: 150 }) })),
});

/** A bounded policy: the tenant's, or a small one when the tenant is unlimited. */
export const policy: fc.Arbitrary<BucketPolicy> = tenant.map((t) => resolvePolicy(t) ?? { perMinute: 7, burst: 3 });

/** Request times in µs: bursts (0 gap), sub-token gaps and long pauses, from a Redis-TIME-sized epoch. */
export const requestTimes = fc
  .array(fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 20_000 }), fc.integer({ min: 0, max: 3_000_000 })), {
    minLength: 1,
    maxLength: 150,
  })
  .map((gaps) => {
    let t = 1_760_000_000_000_000;
    return gaps.map((gap) => (t += gap));
  });
