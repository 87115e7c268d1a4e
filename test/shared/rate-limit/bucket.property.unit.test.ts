import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { takeToken, type BucketState } from '../../../shared/rate-limit/bucket.ts';
import { createMemoryRateLimitStore } from '../../../shared/rate-limit/memory.ts';
import { resolvePolicy } from '../../../shared/rate-limit/policy.ts';
import type { BucketDecision, BucketPolicy } from '../../../shared/rate-limit/port.ts';
import { policy, referenceModel, requestTimes, tenant } from '../../support/rateLimit/bucketModel.ts';

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
        else
          expect(resolved).toEqual(
            { starter: { perMinute: 60, burst: 10 }, pro: { perMinute: 600, burst: 100 }, enterprise: null }[t.plan],
          );
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
});
