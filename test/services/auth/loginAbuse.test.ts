import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { LOGIN_FAILURE_LIMIT } from '../../../services/auth/loginThrottle.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { createTestApp, createTestAuth, createTestUser, provisionTenant } from '../../support/auth.ts';

/**
 * Regression: login could be starved and accounts locked by anyone. Real PostgreSQL,
 * real argon2; client addresses are set per request (`remoteAddress`), the way the gateway sees them.
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
  return app;
}

const loginFrom = (app: FastifyInstance, ip: string, slug: string, email: string, password: string) =>
  app.inject({ method: 'POST', url: '/v1/auth/login', remoteAddress: ip, headers: { 'x-tenant': slug }, payload: { email, password } });

const median = (values: readonly number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? (sorted[mid] ?? 0) : ((sorted[mid - 1] ?? 0) + (sorted[mid] ?? 0)) / 2;
};

describe('when anyone floods login to starve it or lock accounts', () => {
  describe('when 40 junk logins arrive at once from one address', () => {
    it('a real login from another address stays fast (median with load < 3 × median without, alternating rounds)', async () => {
      const app = await gateway();
      const tenant = await provisionTenant(db.pool);
      const user = await createTestUser(db.pool, tenant, 'employee');
      const real = async () => {
        const started = performance.now();
        const response = await loginFrom(app, '192.0.2.10', tenant.slug, user.email, user.password);
        const elapsed = performance.now() - started;
        expect(response.statusCode, response.body).toBe(200);
        return elapsed;
      };
      await real(); // warm-up
      const quiet: number[] = [];
      const loaded: number[] = [];
      const junkStatuses: number[] = [];
      for (let round = 0; round < 7; round++) {
        quiet.push(await real());
        // A fresh attacker address each round, so the per-address failure counter (a second
        // defence) does not hide what the verification gate does.
        const junk = Array.from({ length: 40 }, (_, i) =>
          loginFrom(app, `198.51.100.${round + 1}`, tenant.slug, `junk-${round}-${i}@example.test`, 'not-a-password'),
        );
        const measured = real();
        loaded.push(await measured);
        junkStatuses.push(...(await Promise.all(junk)).map((r) => r.statusCode));
      }
      const ratio = median(loaded) / median(quiet);
      process.stdout.write(
        `login abuse: real login median ${median(quiet).toFixed(1)} ms quiet, ${median(loaded).toFixed(1)} ms beside 40 concurrent junk logins (ratio ${ratio.toFixed(2)}); ` +
          `junk answers: ${junkStatuses.filter((s) => s === 401).length}×401, ${junkStatuses.filter((s) => s === 429).length}×429, ${junkStatuses.filter((s) => s === 503).length}×503\n`,
      );
      expect(junkStatuses.every((s) => s === 401 || s === 429 || s === 503)).toBe(true);
      expect(junkStatuses.filter((s) => s === 429).length).toBeGreaterThan(junkStatuses.length / 2);
      expect(ratio).toBeLessThan(3);
    }, 120_000);
  });

  describe('when an address fails 5 times for an account', () => {
    it('that address is refused for the account, the owner at another address is not', async () => {
      const app = await gateway();
      const tenant = await provisionTenant(db.pool);
      const user = await createTestUser(db.pool, tenant, 'employee');
      for (let i = 0; i < LOGIN_FAILURE_LIMIT; i++) {
        expect((await loginFrom(app, '203.0.113.66', tenant.slug, user.email, 'wrong-password')).statusCode).toBe(401);
      }
      const attacker = await loginFrom(app, '203.0.113.66', tenant.slug, user.email, user.password);
      expect(attacker.statusCode).toBe(429);
      expect(Number(attacker.headers['retry-after'])).toBeGreaterThanOrEqual(1);
      expect((await loginFrom(app, '192.0.2.44', tenant.slug, user.email, user.password)).statusCode).toBe(200);
    });

    it('an account is refused everywhere only after a much larger number of failures from many addresses', async () => {
      const app = await gateway({ loginThrottle: { accountLimit: 12 } });
      const tenant = await provisionTenant(db.pool);
      const user = await createTestUser(db.pool, tenant, 'employee');
      for (let i = 0; i < 12; i++) await loginFrom(app, `203.0.113.${100 + Math.floor(i / 4)}`, tenant.slug, user.email, 'wrong-password');
      expect((await loginFrom(app, '192.0.2.45', tenant.slug, user.email, user.password)).statusCode).toBe(429);
    });
  });

  describe('when an address is written differently', () => {
    it("an NFKC-equivalent form (full-width letters) shares the account's budget", async () => {
      const app = await gateway();
      const tenant = await provisionTenant(db.pool);
      const user = await createTestUser(db.pool, tenant, 'admin', { email: `admin-${Date.now().toString(36)}@example.test` });
      for (let i = 0; i < LOGIN_FAILURE_LIMIT; i++) await loginFrom(app, '203.0.113.7', tenant.slug, user.email, 'wrong-password');
      const fullWidth = user.email.replace('admin', 'ａｄｍｉｎ');
      expect((await loginFrom(app, '203.0.113.7', tenant.slug, fullWidth, user.password)).statusCode).toBe(429);
    });

    it('`admİn@…` neither reaches the account nor gets a fresh budget for it (throttle and lookup agree)', async () => {
      const app = await gateway();
      const tenant = await provisionTenant(db.pool);
      const user = await createTestUser(db.pool, tenant, 'admin', { email: `admin-${Date.now().toString(36)}@example.test` });
      for (let i = 0; i < LOGIN_FAILURE_LIMIT; i++) await loginFrom(app, '203.0.113.8', tenant.slug, user.email, 'wrong-password');
      const dotted = user.email.replace('admin', 'admİn');
      const variant = await loginFrom(app, '203.0.113.8', tenant.slug, dotted, user.password);
      expect(variant.statusCode).not.toBe(200);
      expect([401, 429]).toContain(variant.statusCode);
    });
  });

  describe('when refresh tokens are guessed', () => {
    it('the address is refused after 40 failures; other addresses are not', async () => {
      // The failure counter alone: the per-address refresh bucket (burst 30) would answer first.
      const app = await gateway({ refreshPerAddress: { limit: { burst: 100, perMinute: 6_000 } } });
      const tenant = await provisionTenant(db.pool);
      const refresh = (ip: string, token: string) =>
        app.inject({
          method: 'POST',
          url: '/v1/auth/refresh',
          remoteAddress: ip,
          headers: { 'x-tenant': tenant.slug },
          payload: { refreshToken: token },
        });
      for (let i = 0; i < 40; i++) expect((await refresh('203.0.113.9', `guess-${i}`)).statusCode).toBe(401);
      const refused = await refresh('203.0.113.9', 'guess-41');
      expect(refused.statusCode).toBe(429);
      expect(refused.headers['retry-after']).toBeDefined();
      expect((await refresh('192.0.2.46', 'guess-42')).statusCode).toBe(401);
    });
  });

  describe('when the process is saturated', () => {
    it('logins beyond the verification queue get 503 with Retry-After, the rest are answered', async () => {
      // A long maxWaitMs: only the queue bound may answer 503 here, however slow the machine is.
      const app = await gateway({ loginGate: { concurrency: 1, maxQueued: 2, maxWaitMs: 60_000 } });
      const tenant = await provisionTenant(db.pool);
      const answers = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          loginFrom(app, `203.0.113.${20 + i}`, tenant.slug, `nobody-${i}@example.test`, 'not-a-password'),
        ),
      );
      const statuses = answers.map((r) => r.statusCode);
      expect(statuses.filter((s) => s === 401).length).toBeGreaterThanOrEqual(3);
      const busy = answers.filter((r) => r.statusCode === 503);
      expect(busy.length).toBeGreaterThan(0);
      for (const response of busy) {
        expect(response.headers['retry-after']).toBe('1');
        expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
      }
    });

    it('logins and refreshes beyond the process-wide bound get 503 with Retry-After before any work', async () => {
      const app = await gateway({ globalAuthLimit: { burst: 3, perMinute: 1 } });
      const tenant = await provisionTenant(db.pool);
      const statuses: number[] = [];
      for (let i = 0; i < 5; i++)
        statuses.push((await loginFrom(app, `192.0.2.${60 + i}`, tenant.slug, `n${i}@example.test`, 'not-a-password')).statusCode);
      expect(statuses).toEqual([401, 401, 401, 503, 503]);
      const refresh = await app.inject({
        method: 'POST',
        url: '/v1/auth/refresh',
        headers: { 'x-tenant': tenant.slug },
        payload: { refreshToken: 'x' },
      });
      expect(refresh.statusCode).toBe(503);
      expect(Number(refresh.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    });
  });
});
