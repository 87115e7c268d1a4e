import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BucketPolicy, RateLimitStore } from '../../../shared/rate-limit/port.ts';

/**
 * The rate-limit store contract: both adapters run exactly these tests. The Redis store keeps
 * time with Redis TIME, which a test cannot set, so the fixture exposes a clock (`now`) and a way
 * to let time pass (`elapse`): the memory fixture moves its injected clock, the Redis fixture
 * waits in real time. Assertions that involve time are one-sided where real time could only
 * add delay (a bucket never refills early), and bounded loosely on the other side.
 */
export type RateLimitStoreFixture = {
  store: RateLimitStore;
  /** Milliseconds on the clock the store uses. */
  now(): number;
  elapse(ms: number): Promise<void>;
  teardown(): Promise<void>;
};

/** One token a minute: nothing refills while a test runs, so counts are exact on any clock. */
const frozen = (burst: number): BucketPolicy => ({ perMinute: 1, burst });

export function rateLimitStoreContract(name: string, createFixture: () => Promise<RateLimitStoreFixture>): void {
  describe(`rate-limit store contract: ${name}`, () => {
    let fixture: RateLimitStoreFixture;
    let store: RateLimitStore;
    const key = (label: string) => `contract-${label}-${randomUUID()}`;

    /** Consumes until a request is accepted; returns the clock reading at acceptance. */
    const consumeUntilAllowed = async (bucket: string, policy: BucketPolicy, deadlineMs: number) => {
      const started = fixture.now();
      for (;;) {
        const decision = await store.consume(bucket, policy);
        if (decision.allowed) return fixture.now();
        if (fixture.now() - started > deadlineMs) throw new Error(`still refused after ${deadlineMs} ms`);
        await fixture.elapse(5);
      }
    };

    beforeAll(async () => {
      fixture = await createFixture();
      store = fixture.store;
    });
    afterAll(async () => {
      await fixture?.teardown();
    });

    describe('when the bucket is new', () => {
      it('accepts exactly `burst` requests at once, counting down what remains', async () => {
        const bucket = key('burst');
        const decisions = [];
        for (let i = 0; i < 12; i++) decisions.push(await store.consume(bucket, frozen(10)));
        expect(decisions.map((d) => d.allowed)).toEqual([...Array<boolean>(10).fill(true), false, false]);
        expect(decisions.map((d) => d.remaining)).toEqual([9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0]);
      });

      it('reports a full bucket as nothing to wait for', async () => {
        const decision = await store.consume(key('fresh'), { perMinute: 60, burst: 5 });
        expect(decision).toMatchObject({ allowed: true, remaining: 4, waitMs: 0 });
        // one token at one per second: full again within a second
        expect(decision.resetMs).toBeGreaterThan(900);
        expect(decision.resetMs).toBeLessThanOrEqual(1000);
      });
    });

    describe('when many requests race for one bucket', () => {
      it('accepts exactly `burst` of them', async () => {
        const bucket = key('race');
        const decisions = await Promise.all(Array.from({ length: 60 }, () => store.consume(bucket, frozen(10))));
        expect(decisions.filter((d) => d.allowed)).toHaveLength(10);
        expect(new Set(decisions.filter((d) => d.allowed).map((d) => d.remaining))).toEqual(new Set([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]));
      });
    });

    describe('when the bucket is empty', () => {
      it('refuses with the wait until one token has flowed back', async () => {
        const bucket = key('empty');
        const policy = { perMinute: 60, burst: 2 };
        await store.consume(bucket, policy);
        await store.consume(bucket, policy);
        const refused = await store.consume(bucket, policy);
        expect(refused).toMatchObject({ allowed: false, remaining: 0 });
        expect(refused.waitMs).toBeGreaterThan(0);
        expect(refused.waitMs).toBeLessThanOrEqual(1000);
        expect(refused.resetMs).toBeGreaterThan(refused.waitMs);
        expect(refused.resetMs).toBeLessThanOrEqual(2000);
      });

      it('refills at perMinute/60 per second, fractions included (90/min → one per 667 ms)', async () => {
        const bucket = key('fraction');
        const policy = { perMinute: 90, burst: 1 };
        const emptiedAfter = fixture.now();
        expect((await store.consume(bucket, policy)).allowed).toBe(true);
        const refused = await store.consume(bucket, policy);
        expect(refused.allowed).toBe(false);
        expect(refused.waitMs).toBeLessThanOrEqual(Math.ceil(60_000_000 / 90) / 1000); // whole µs
        const acceptedAt = await consumeUntilAllowed(bucket, policy, 5_000);
        // never early; late only by polling and scheduling
        expect(acceptedAt - emptiedAfter).toBeGreaterThanOrEqual(60_000 / 90 - 1);
        expect(acceptedAt - emptiedAfter).toBeLessThan(60_000 / 90 + 500);
      });

      it('accepts one more request per refilled token, never more than the burst', async () => {
        const bucket = key('steady');
        const policy = { perMinute: 600, burst: 3 }; // one per 100 ms
        for (let i = 0; i < 3; i++) expect((await store.consume(bucket, policy)).allowed).toBe(true);
        await fixture.elapse(2_000); // 20 tokens' worth, capped at 3
        const decisions = [];
        for (let i = 0; i < 4; i++) decisions.push(await store.consume(bucket, policy));
        expect(decisions.map((d) => d.allowed)).toEqual([true, true, true, false]);
      });
    });

    describe('when the policy changes between requests', () => {
      it('caps what is held at a smaller burst at once (downgrade)', async () => {
        const bucket = key('downgrade');
        expect((await store.consume(bucket, frozen(100))).remaining).toBe(99);
        expect((await store.consume(bucket, frozen(10))).remaining).toBe(9);
      });

      it('grants no tokens for a larger burst, only a larger room to refill into (upgrade)', async () => {
        const bucket = key('upgrade');
        await store.consume(bucket, frozen(1));
        expect((await store.consume(bucket, frozen(100))).allowed).toBe(false);
      });
    });

    describe('when keys differ', () => {
      it('keeps one bucket per key', async () => {
        const [a, b] = [key('a'), key('b')];
        await store.consume(a, frozen(1));
        expect((await store.consume(a, frozen(1))).allowed).toBe(false);
        expect((await store.consume(b, frozen(1))).allowed).toBe(true);
      });
    });
  });
}
