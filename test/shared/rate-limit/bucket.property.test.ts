import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisRateLimitStore, type RedisRateLimitStore } from '../../../shared/rate-limit/redis.ts';
import { policy, referenceModel, requestTimes } from '../../support/rateLimit/bucketModel.ts';

describe('token bucket arithmetic', () => {
  describe('the Redis Lua script', () => {
    let store: RedisRateLimitStore;
    beforeAll(async () => {
      store = await createRedisRateLimitStore({
        url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
        prefix: `test:rl:${randomUUID()}:`,
      });
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
          for (let i = 0; i < times.length;) {
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
