import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { IP_FAILURE_LIMIT } from '../../../services/auth/loginThrottle.ts';
import { DEFAULT_MAX_REFRESHES_IN_FLIGHT_PER_ADDRESS, DEFAULT_REFRESH_LIMIT_PER_ADDRESS } from '../../../services/auth/sessions.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { createTestApp, createTestAuth, createTestUser, provisionTenant } from '../../support/auth.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * Regression: the process-wide bucket on logins and refreshes was taken before the per-address
 * bounds, so one address that those bounds refuse drained it and every tenant's logins got 503.
 * Real PostgreSQL and argon2; client addresses are set per request (`remoteAddress`).
 */
let db: TestDatabase;
const opened: Array<{ app: FastifyInstance; auth: AuthDeps }> = [];

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  for (const { app, auth } of opened) {
    await app.close();
    await auth.close();
  }
  await db?.drop();
});

async function gateway(options: Parameters<typeof createTestAuth>[1] = {}) {
  const auth = await createTestAuth(db.pool, options);
  const app = await createTestApp(auth);
  opened.push({ app, auth });
  return { app, auth };
}

const loginFrom = (app: FastifyInstance, ip: string, slug: string, email: string, password: string) =>
  app.inject({ method: 'POST', url: '/v1/auth/login', remoteAddress: ip, headers: { 'x-tenant': slug }, payload: { email, password } });
const refreshFrom = (app: FastifyInstance, ip: string, slug: string, refreshToken: string) =>
  app.inject({ method: 'POST', url: '/v1/auth/refresh', remoteAddress: ip, headers: { 'x-tenant': slug }, payload: { refreshToken } });
const junkSlug = () => `t-${randomBytes(6).toString('hex')}`;
const junkEmail = () => `junk-${randomBytes(4).toString('hex')}@example.test`;

/** Nearest-rank percentile. */
const percentile = (values: readonly number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)] ?? Number.NaN;
};

/**
 * Junk logins from one address at `perSecond` (any tenant slug, any e-mail), paced against the
 * clock so that a late timer catches up, in at most a few requests at once.
 */
function startFlood(app: FastifyInstance, ip: string, perSecond: number) {
  const inFlight = new Set<Promise<unknown>>();
  const statuses: number[] = [];
  let sent = 0;
  let activeMs = 0;
  let since = 0;
  let timer: NodeJS.Timeout | undefined;
  const tick = () => {
    const due = Math.min(10, Math.floor(((activeMs + performance.now() - since) * perSecond) / 1000) - sent);
    for (let i = 0; i < due; i++) {
      sent++;
      const answer = loginFrom(app, ip, junkSlug(), junkEmail(), 'not-a-password').then((r) => statuses.push(r.statusCode));
      inFlight.add(answer);
      void answer.finally(() => inFlight.delete(answer));
    }
  };
  return {
    statuses,
    sent: () => sent,
    /** Sends per second over the time the flood was on. */
    rate: () => (sent * 1000) / Math.max(1, activeMs + (timer ? performance.now() - since : 0)),
    on() {
      since = performance.now();
      timer = setInterval(tick, 10);
      tick();
    },
    async off() {
      clearInterval(timer);
      activeMs += performance.now() - since;
      timer = undefined;
      await Promise.all(inFlight);
    },
  };
}

describe('when one address is refused by the per-address bounds', () => {
  it('its refused logins take nothing from the shared bucket: another address still logs in', async () => {
    const { app } = await gateway({ loginThrottle: { ipLimit: 2 }, globalAuthLimit: { burst: 3, perMinute: 1 } });
    const tenant = await provisionTenant(db.pool);
    const user = await createTestUser(db.pool, tenant, 'employee');
    const junk: number[] = [];
    for (let i = 0; i < 12; i++) junk.push((await loginFrom(app, '198.51.100.20', junkSlug(), junkEmail(), 'not-a-password')).statusCode);
    expect(junk).toEqual([401, 401, ...Array<number>(10).fill(429)]);
    expect((await loginFrom(app, '192.0.2.20', tenant.slug, user.email, user.password)).statusCode).toBe(200);
  });

  it('logins the verification gate refuses for their address take nothing from the shared bucket either', async () => {
    // The gate lets one address have 4 logins running or waiting: 6 of these 10 are refused by it.
    // A long maxWaitMs: the fourth queued login waits for three verifications, however slow the
    // machine is, so only the per-address cap may refuse.
    const { app } = await gateway({ globalAuthLimit: { burst: 5, perMinute: 1 }, loginGate: { maxWaitMs: 60_000 } });
    const tenant = await provisionTenant(db.pool);
    const user = await createTestUser(db.pool, tenant, 'employee');
    const junk = await Promise.all(
      Array.from({ length: 10 }, () => loginFrom(app, '198.51.100.21', junkSlug(), junkEmail(), 'not-a-password')),
    );
    expect(junk.map((r) => r.statusCode).toSorted((a, b) => a - b)).toEqual([...Array<number>(4).fill(401), ...Array<number>(6).fill(429)]);
    expect((await loginFrom(app, '192.0.2.21', tenant.slug, user.email, user.password)).statusCode).toBe(200);
  });

  it('its refused refreshes take nothing from the shared bucket: another address still refreshes', async () => {
    const { app } = await gateway({ loginThrottle: { ipLimit: 2 }, globalAuthLimit: { burst: 3, perMinute: 1 } });
    const tenant = await provisionTenant(db.pool);
    const junk: number[] = [];
    for (let i = 0; i < 12; i++) junk.push((await refreshFrom(app, '198.51.100.22', tenant.slug, `guess-${i}`)).statusCode);
    expect(junk).toEqual([401, 401, ...Array<number>(10).fill(429)]);
    // 401 (an unknown token), not 503: the shared bucket still had a token for this address.
    expect((await refreshFrom(app, '192.0.2.22', tenant.slug, 'another-guess')).statusCode).toBe(401);
  });
});

describe('when one address refreshes in bulk', () => {
  // A shared bucket as deep as the default (burst 200) that barely refills, so that whatever one
  // address takes from it stays taken while the other address logs in.
  const slowShared = { burst: 200, perMinute: 1 };
  const counts = (statuses: readonly number[]) =>
    Object.fromEntries([...new Set(statuses)].map((s) => [s, statuses.filter((x) => x === s).length]));

  it('300 concurrent junk refreshes from it leave the shared bucket to others', async () => {
    const { app } = await gateway({ globalAuthLimit: slowShared });
    const tenant = await provisionTenant(db.pool);
    const user = await createTestUser(db.pool, tenant, 'employee');
    // All of them arrive before the first failure is counted: only the in-flight cap stops them.
    const junk = await Promise.all(Array.from({ length: 300 }, (_, i) => refreshFrom(app, '198.51.100.40', tenant.slug, `guess-${i}`)));
    const statuses = junk.map((r) => r.statusCode);
    // The in-flight cap refuses most at once; the few that pass fail, until the failure counter
    // (40 a minute) would refuse the address too. None is refused by the shared bucket.
    expect(statuses.filter((s) => s !== 401 && s !== 429)).toEqual([]);
    expect(counts(statuses)[401]).toBeLessThanOrEqual(DEFAULT_MAX_REFRESHES_IN_FLIGHT_PER_ADDRESS + IP_FAILURE_LIMIT);
    expect((await loginFrom(app, '192.0.2.40', tenant.slug, user.email, user.password)).statusCode).toBe(200);
  });

  it('an insider refreshing many sessions in a loop is bounded by its own address, not by the shared bucket', async () => {
    const { app } = await gateway({ globalAuthLimit: slowShared });
    const tenant = await provisionTenant(db.pool);
    const insider = await createTestUser(db.pool, tenant, 'employee');
    const victim = await createTestUser(db.pool, tenant, 'employee');
    const insiderIp = '198.51.100.41';
    const sessions: string[] = [];
    for (let i = 0; i < 10; i++) {
      const login = await loginFrom(app, insiderIp, tenant.slug, insider.email, insider.password);
      expect(login.statusCode).toBe(200);
      sessions.push(login.json<{ refreshToken: string }>().refreshToken);
    }
    // Ten families refreshed in parallel, 40 times each, retrying whatever is refused.
    const statuses: number[] = [];
    await Promise.all(
      sessions.map(async (first) => {
        let token = first;
        for (let i = 0; i < 40; i++) {
          const response = await refreshFrom(app, insiderIp, tenant.slug, token);
          statuses.push(response.statusCode);
          if (response.statusCode === 200) token = response.json<{ refreshToken: string }>().refreshToken;
        }
      }),
    );
    const refused = counts(statuses);
    expect(refused[503]).toBeUndefined();
    // The per-address burst, plus what flows back (2 a second) while the loop runs.
    expect(refused[200]).toBeGreaterThanOrEqual(DEFAULT_REFRESH_LIMIT_PER_ADDRESS.burst);
    expect(refused[200]).toBeLessThan(slowShared.burst - sessions.length);
    expect(refused[429]).toBeGreaterThan(0);
    expect((await loginFrom(app, '192.0.2.41', tenant.slug, victim.email, victim.password)).statusCode).toBe(200);
  }, 60_000);
});

describe('when one address floods junk logins at about 150 a second', () => {
  it('a correct login for another tenant from another address never gets 503 and keeps its p95 within 2 × quiet', async () => {
    // A shared bucket the flood alone would empty within a second (50 a second, burst 20); the
    // default (burst 200) only takes longer to empty. Correct logins need about 10 a second.
    // The address's failure window outlasts the measurement: with the default minute it could
    // expire mid-way and let the flood's next 40 failures be verified beside the correct logins.
    const { app, auth } = await gateway({ globalAuthLimit: { burst: 20, perMinute: 3_000 }, loginThrottle: { ipWindowSeconds: 3_600 } });
    const victim = await provisionTenant(db.pool);
    const user = await createTestUser(db.pool, victim, 'employee');
    const floodIp = '198.51.100.30';
    const flood = startFlood(app, floodIp, 150);
    const correctLogin = async () => {
      const started = performance.now();
      const response = await loginFrom(app, '192.0.2.30', victim.slug, user.email, user.password);
      return { ms: performance.now() - started, status: response.statusCode };
    };

    await correctLogin(); // warm-up: connections, caches, the JIT
    // The flood's first 40 failures are verified (one at a time, by the gate's per-address
    // share); from then on its address is refused by its failure counter, which is the steady
    // state measured below.
    flood.on();
    await waitFor(async () => (await auth.throttle.ipRetryAfterSeconds(floodIp)) > 0, 60_000, 'the flooding address to be refused');
    await flood.off();

    // Quiet and flooded samples interleaved (ABBA), so that the machine's other load falls on both.
    const quiet: Array<{ ms: number; status: number }> = [];
    const flooded: Array<{ ms: number; status: number }> = [];
    const measureFlooded = async () => {
      const before = flood.sent();
      flood.on();
      // Let about 100 ms of flood arrive first, so that the login meets it in full.
      await waitFor(() => flood.sent() >= before + 15, 10_000, 'the flood to be under way');
      flooded.push(await correctLogin());
      await flood.off();
    };
    for (let round = 0; round < 60; round++) {
      if (round % 2 === 0) {
        quiet.push(await correctLogin());
        await measureFlooded();
      } else {
        await measureFlooded();
        quiet.push(await correctLogin());
      }
    }

    const p95 = {
      quiet: percentile(
        quiet.map((s) => s.ms),
        95,
      ),
      flooded: percentile(
        flooded.map((s) => s.ms),
        95,
      ),
    };
    const junk = (status: number) => flood.statuses.filter((s) => s === status).length;
    process.stdout.write(
      `login flood: correct login p95 ${p95.quiet.toFixed(1)} ms quiet, ${p95.flooded.toFixed(1)} ms flooded ` +
        `(ratio ${(p95.flooded / p95.quiet).toFixed(2)}; medians ${percentile(
          quiet.map((s) => s.ms),
          50,
        ).toFixed(1)} / ` +
        `${percentile(
          flooded.map((s) => s.ms),
          50,
        ).toFixed(1)} ms); flood ${flood.sent()} sent at ${flood.rate().toFixed(0)}/s: ` +
        `${junk(401)}×401, ${junk(429)}×429, ${junk(503)}×503\n`,
    );
    // The decisive fact: the flood costs the other address no shared capacity.
    expect(flooded.filter((s) => s.status !== 200).map((s) => s.status)).toEqual([]);
    expect(quiet.filter((s) => s.status !== 200).map((s) => s.status)).toEqual([]);
    expect(flood.rate()).toBeGreaterThan(100);
    expect(p95.flooded).toBeLessThanOrEqual(2 * p95.quiet);
  }, 180_000);
});
