import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { takeToken, type BucketState } from '../../../shared/rate-limit/bucket.ts';
import { createMemoryRateLimitStore } from '../../../shared/rate-limit/memory.ts';
import { resolvePolicy, type TenantLimits } from '../../../shared/rate-limit/policy.ts';
import type { BucketDecision, BucketPolicy } from '../../../shared/rate-limit/port.ts';
import { createRedisRateLimitStore, type RedisRateLimitStore } from '../../../shared/rate-limit/redis.ts';

/**
 * Reference model, written from the definition rather than from the implementation: a bucket of
 * capacity B refilled at rate ρ accepts a request at t iff, after it, every interval [a, t]
 * that starts at an accepted request holds at most B + ρ·(t − a) accepted requests (the
 * (B, ρ) arrival curve). Equivalently the level before t is
 *   min(B, min over accepted a_i of B + ρ·(t − a_i) − #accepted since a_i).
 * All in exact integers: µs, and 60,000,000 units per token (ρ = perMinute units per µs).
 */
const U = 60_000_000;

function referenceModel(policy: BucketPolicy, timesUs: readonly number[]) {
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

const tenant: fc.Arbitrary<TenantLimits> = fc.record({
  plan: fc.constantFrom('starter', 'pro', 'enterprise'),
  rateLimitOverride: fc.option(fc.record({ perMinute: fc.integer({ min: 1, max: 5_000 }), burst: fc.integer({ min: 1, max: 150 }) })),
});

/** A bounded policy: the tenant's, or a small one when the tenant is unlimited. */
const policy: fc.Arbitrary<BucketPolicy> = tenant.map((t) => resolvePolicy(t) ?? { perMinute: 7, burst: 3 });

/** Request times in µs: bursts (0 gap), sub-token gaps and long pauses, from a Redis-TIME-sized epoch. */
const requestTimes = fc
  .array(fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 20_000 }), fc.integer({ min: 0, max: 3_000_000 })), { minLength: 1, maxLength: 150 })
  .map((gaps) => {
    let t = 1_760_000_000_000_000;
    return gaps.map((gap) => (t += gap));
  });

const run = (p: BucketPolicy, timesUs: readonly number[]): BucketDecision[] => {
  let state: BucketState | undefined;
  return timesUs.map((t) => {
    const step = takeToken(state, p, t);
    state = step.state;
    return step.decision;
  });
};

describe('token bucket arithmetic', () => {
  it('decides like the reference model for any plan, override and request times', () => {
    fc.assert(
      fc.property(policy, requestTimes, (p, times) => {
        expect(run(p, times)).toEqual(referenceModel(p, times));
      }),
      { numRuns: 1_000 },
    );
  });

  it('resolves plans to their published limits and lets an override win', () => {
    fc.assert(
      fc.property(tenant, (t) => {
        const resolved = resolvePolicy(t);
        if (t.rateLimitOverride) expect(resolved).toEqual(t.rateLimitOverride);
        else expect(resolved).toEqual({ starter: { perMinute: 60, burst: 10 }, pro: { perMinute: 600, burst: 100 }, enterprise: null }[t.plan]);
      }),
    );
  });

  it('the memory store, on its injected clock, decides like the reference model', async () => {
    await fc.assert(
      fc.asyncProperty(policy, requestTimes, async (p, times) => {
        let clock = 0;
        const store = createMemoryRateLimitStore({ now: () => clock });
        const decisions = [];
        for (const t of times) {
          clock = t / 1000;
          decisions.push(await store.consume('k', p));
        }
        expect(decisions).toEqual(referenceModel(p, times));
      }),
      { numRuns: 300 },
    );
  });

  describe('the Redis Lua script', () => {
    let store: RedisRateLimitStore;
    beforeAll(async () => {
      store = await createRedisRateLimitStore({ url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix: `test:rl:${randomUUID()}:` });
    });
    afterAll(() => store.close());

    it('decides like the reference model, given the same times', async () => {
      await fc.assert(
        fc.asyncProperty(policy, requestTimes, async (p, times) => {
          const key = randomUUID();
          const decisions = [];
          for (const t of times) decisions.push(await store.consumeAt(key, p, t));
          expect(decisions).toEqual(referenceModel(p, times));
        }),
        { numRuns: 150 },
      );
    });

    it('decides like the reference model when the requests of one instant arrive as one counted entry', async () => {
      await fc.assert(
        fc.asyncProperty(policy, requestTimes, async (p, times) => {
          const key = randomUUID();
          const decisions = [];
          for (let i = 0; i < times.length; ) {
            let count = 1;
            while (times[i + count] === times[i]) count++;
            decisions.push(...(await store.consumeManyAt(key, p, times[i] as number, count)));
            i += count;
          }
          expect(decisions).toEqual(referenceModel(p, times));
        }),
        { numRuns: 150 },
      );
    });
  });
});
