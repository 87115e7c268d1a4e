import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
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
