import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { wholeTokens } from '../../../shared/rate-limit/bucket.ts';
import { createRedisRateLimitStore, type RedisRateLimitStore } from '../../../shared/rate-limit/redis.ts';
import { waitFor } from '../../support/waitFor.ts';
import { rateLimitStoreContract } from '../../support/contracts/rateLimitStore.ts';

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

describe('when many requests arrive in one event-loop turn', () => {
  it('decides them in one script call per turn and key, exactly: two stores sharing Redis hand out burst tokens, no more', async () => {
    const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
    const prefix = `test:rl:${randomUUID()}:`;
    const [a, b] = await Promise.all([createRedisRateLimitStore({ url, prefix }), createRedisRateLimitStore({ url, prefix })]);
    try {
      // Per call: how many keys it names, and how many requests those keys stand for (the third
      // ARGV of each key: evalsha(sha, numkeys, ...keys, now, ...[perMinute, burst, count, lease]).
      const calls: Array<{ keys: number; requests: number }> = [];
      for (const store of [a, b]) {
        const original = store.client.evalsha.bind(store.client);
        store.client.evalsha = ((...args: Parameters<typeof original>) => {
          const keys = Number(args[1]);
          const counts = args.slice(2 + keys + 1).filter((_, i) => i % 4 === 2);
          calls.push({ keys, requests: counts.reduce<number>((sum, count) => sum + Number(count), 0) });
          return original(...args);
        }) as typeof store.client.evalsha;
      }
      const policy = { perMinute: 1, burst: 150 }; // no refill within the test
      const decisions = await Promise.all(Array.from({ length: 400 }, (_, i) => (i % 2 === 0 ? a : b).consume('shared', policy)));
      expect(decisions.filter((d) => d.allowed)).toHaveLength(150);
      expect(decisions.filter((d) => !d.allowed)).toHaveLength(250);
      // 400 requests in one turn: one call per store (a NOSCRIPT retry goes through eval, not
      // evalsha), naming the one key once with the count of its requests
      expect(calls.reduce((sum, call) => sum + call.requests, 0)).toBe(400);
      expect(calls.length).toBeLessThanOrEqual(2);
      expect(calls.map((call) => call.keys)).toEqual(calls.map(() => 1));
      const remaining = decisions
        .filter((d) => d.allowed)
        .map((d) => d.remaining)
        .sort((x, y) => y - x);
      expect(remaining).toEqual(Array.from({ length: 150 }, (_, i) => 149 - i));
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});

describe('when requests arrive while a script call is in flight', () => {
  it('sends them together as the next call once it answers, one call in flight at a time', async () => {
    const store = await createRedisRateLimitStore({
      url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
      prefix: `test:rl:${randomUUID()}:`,
    });
    try {
      const calls: number[] = []; // requests per call, in order
      let inFlight = 0;
      let mostInFlight = 0;
      const original = store.client.evalsha.bind(store.client);
      store.client.evalsha = ((...args: Parameters<typeof original>) => {
        const keys = Number(args[1]);
        calls.push(
          args
            .slice(2 + keys + 1)
            .filter((_, i) => i % 4 === 2)
            .reduce<number>((sum, count) => sum + Number(count), 0),
        );
        mostInFlight = Math.max(mostInFlight, ++inFlight);
        // A slow link: each answer is held for 50 ms after Redis gave it.
        return original(...args)
          .then((answer) => delay(50).then(() => answer))
          .finally(() => inFlight--);
      }) as typeof store.client.evalsha;
      const policy = { perMinute: 1, burst: 1_000 };
      const first = store.consume('busy', policy);
      // The store sends from setImmediate; this one runs after it, with the call on the wire.
      await new Promise((resolve) => setImmediate(resolve));
      expect(calls).toEqual([1]);
      // Sixty arrivals over three event-loop turns while the first call is out.
      const later: Array<ReturnType<typeof store.consume>> = [];
      for (let turn = 0; turn < 3; turn++) {
        for (let i = 0; i < 20; i++) later.push(store.consume('busy', policy));
        await new Promise((resolve) => setImmediate(resolve));
      }
      const decisions = await Promise.all([first, ...later]);
      expect(calls).toEqual([1, 60]);
      expect(mostInFlight).toBe(1);
      expect(decisions.map((d) => d.remaining)).toEqual(Array.from({ length: 61 }, (_, i) => 999 - i));
    } finally {
      await store.close();
    }
  });
});

describe('when a script call fails while requests queue behind it', () => {
  it('fails them with it, so a hung Redis costs a request one command timeout, not two', async () => {
    const store = await createRedisRateLimitStore({
      url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
      prefix: `test:rl:${randomUUID()}:`,
    });
    try {
      let calls = 0;
      const original = store.client.evalsha.bind(store.client);
      store.client.evalsha = ((...args: Parameters<typeof original>) => {
        calls++;
        // The first call stands for a command that times out after 300 ms.
        if (calls === 1) return delay(300).then(() => Promise.reject(new Error('Command timed out')));
        return original(...args);
      }) as typeof store.client.evalsha;
      const policy = { perMinute: 60, burst: 10 };
      const started = performance.now();
      const settledAt = (p: Promise<unknown>) =>
        p.then(
          () => ({ ok: true, ms: performance.now() - started }),
          () => ({ ok: false, ms: performance.now() - started }),
        );
      const first = settledAt(store.consume('slow', policy));
      await new Promise((resolve) => setImmediate(resolve)); // the first call is out
      const queued = Array.from({ length: 10 }, () => settledAt(store.consume('slow', policy)));
      const outcomes = await Promise.all([first, ...queued]);
      expect(outcomes.map((o) => o.ok)).toEqual(Array<boolean>(11).fill(false));
      expect(Math.max(...outcomes.map((o) => o.ms))).toBeLessThan(550);
      expect(calls).toBe(1);
      // Redis answers again: the next request goes through.
      expect((await store.consume('slow', policy)).allowed).toBe(true);
    } finally {
      await store.close();
    }
  });
});

describe('when a gateway is busy with one big bucket', () => {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  /** Counts a store's script calls. */
  const countCalls = (store: RedisRateLimitStore) => {
    const counted = { calls: 0 };
    const original = store.client.evalsha.bind(store.client);
    store.client.evalsha = ((...args: Parameters<typeof original>) => {
      counted.calls++;
      return original(...args);
    }) as typeof store.client.evalsha;
    return counted;
  };
  /** A store on a fresh prefix for `run`, closed afterwards. */
  const withStore = async (run: (store: RedisRateLimitStore, prefix: string) => Promise<void>) => {
    const prefix = `test:rl:${randomUUID()}:`;
    const store = await createRedisRateLimitStore({ url, prefix });
    try {
      await run(store, prefix);
    } finally {
      await store.close();
    }
  };
  /** `clients` closed-loop callers per store, each sending `each` requests one after the other. */
  const closedLoop = async (
    stores: readonly RedisRateLimitStore[],
    clients: number,
    each: number,
    policy: { perMinute: number; burst: number },
  ) => {
    const decisions: Array<Awaited<ReturnType<RedisRateLimitStore['consume']>>> = [];
    await Promise.all(
      Array.from({ length: clients * stores.length }, async (_, i) => {
        const store = stores[i % stores.length] as RedisRateLimitStore;
        for (let n = 0; n < each; n++) decisions.push(await store.consume('big', policy));
      }),
    );
    return decisions;
  };

  it('spends leased tokens without a round trip each, and two gateways hand out no token twice: admitted + left in Redis = the bucket', async () => {
    const prefix = `test:rl:${randomUUID()}:`;
    const [a, b] = await Promise.all([createRedisRateLimitStore({ url, prefix }), createRedisRateLimitStore({ url, prefix })]);
    try {
      const counted = [countCalls(a), countCalls(b)];
      const policy = { perMinute: 1, burst: 3_000 }; // less than a token refills while the test runs
      // 16 closed-loop callers over the two gateways, 4,000 requests for 3,000 tokens
      const decisions = await closedLoop([a, b], 8, 250, policy);
      const admitted = decisions.filter((d) => d.allowed).length;
      const calls = counted[0]!.calls + counted[1]!.calls;
      process.stdout.write(`[rate-limit leases] ${admitted} of ${decisions.length} admitted in ${calls} script calls\n`);
      expect(admitted).toBeLessThanOrEqual(3_000);
      // (one call per event-loop turn without leases: about 380 here)
      expect(calls).toBeLessThan(decisions.length / 20);
      for (const d of decisions.filter((x) => x.allowed)) expect(d.remaining).toBeLessThan(3_000);
      // Unspent leases go back within two lease lifetimes: then every token is either admitted or
      // still in the bucket, none lost and none handed out twice.
      const accounted = async () => wholeTokens(Number(await a.client.hget(`${prefix}big`, 'u'))) + admitted === 3_000;
      expect(await waitFor(accounted, 400).catch(() => false)).toBe(true);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('gives a lease nobody spends back to the bucket', () =>
    withStore(async (store, prefix) => {
      const policy = { perMinute: 1, burst: 100_000 };
      const tokensInRedis = async () => wholeTokens(Number(await store.client.hget(`${prefix}big`, 'u')));
      // 600 requests at once: the call decides 512 (a call's most) and, with that much demand,
      // leases 256 more; the other 88 requests spend 88 of them and nobody asks for the rest.
      const decisions = await Promise.all(Array.from({ length: 600 }, () => store.consume('big', policy)));
      expect(decisions.every((d) => d.allowed)).toBe(true);
      expect(await tokensInRedis()).toBe(100_000 - 512 - 256);
      // Within two lease lifetimes.
      expect(await waitFor(async () => (await tokensInRedis()) === 100_000 - 600, 400).catch(() => false)).toBe(true);
    }));

  it('holds a refusal of a big bucket at most 100 ms (leased tokens may come back), a plan-sized one until its next token', () =>
    withStore(async (store) => {
      const counted = countCalls(store);
      for (const policy of [
        { perMinute: 1, burst: 1_000 },
        { perMinute: 1, burst: 10 },
      ]) {
        const key = `refused-${policy.burst}`;
        for (let i = 0; i < policy.burst; i++) expect((await store.consume(key, policy)).allowed).toBe(true);
        expect((await store.consume(key, policy)).allowed).toBe(false);
        // Past the 100 ms a big bucket's refusal may be held: time passing is what is tested.
        await delay(150);
        const before = counted.calls;
        expect((await store.consume(key, policy)).allowed).toBe(false);
        expect(counted.calls - before, `burst ${policy.burst}`).toBe(policy.burst >= 1_000 ? 1 : 0);
      }
    }));

  it('leases nothing for buckets under 1,000 tokens (every plan): each admitted request is decided by Redis', () =>
    withStore(async (store) => {
      const counted = countCalls(store);
      const decisions = await closedLoop([store], 1, 120, { perMinute: 1, burst: 100 });
      // one call per admitted request and one for the first refusal (the later ones are answered
      // locally, as for every refused bucket)
      expect(counted.calls).toBe(101);
      expect(decisions.filter((d) => d.allowed).map((d) => d.remaining)).toEqual(Array.from({ length: 100 }, (_, i) => 99 - i));
    }));
});
