import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { createRedisRateLimitStore } from '../../../shared/rate-limit/redis.ts';
import { rateLimitStoreContract } from './contract.ts';

rateLimitStoreContract('Redis', async () => {
  const store = await createRedisRateLimitStore({
    url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
    prefix: `test:rl:${randomUUID()}:`,
  });
  return {
    store,
    // Redis TIME is this host's clock: real time is the only way to let a Redis bucket refill.
    now: () => Date.now(),
    elapse: (ms) => delay(ms),
    teardown: () => store.close(),
  };
});

describe('when a Redis bucket has refused a request', () => {
  it('answers further requests for that bucket locally until a token can exist again', async () => {
    const store = await createRedisRateLimitStore({
      url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
      prefix: `test:rl:${randomUUID()}:`,
    });
    try {
      const policy = { perMinute: 1, burst: 1 }; // next token in a minute
      expect((await store.consume('hammered', policy)).allowed).toBe(true);
      const refused = await store.consume('hammered', policy);
      expect(refused.allowed).toBe(false);

      store.client.disconnect(); // from here on, anything that reaches Redis fails
      const local = await store.consume('hammered', policy);
      expect(local).toMatchObject({ allowed: false, remaining: 0 });
      expect(local.waitMs).toBeLessThanOrEqual(refused.waitMs);
      expect(local.waitMs).toBeGreaterThan(refused.waitMs - 5_000);
      await expect(store.consume('other', policy)).rejects.toThrow();
      // another policy (a plan change) is Redis's to decide
      await expect(store.consume('hammered', { perMinute: 600, burst: 100 })).rejects.toThrow();
    } finally {
      await store.close();
    }
  });
});
