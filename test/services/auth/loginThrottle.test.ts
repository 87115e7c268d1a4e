import { createHash, randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { LOGIN_FAILURE_LIMIT } from '../../../services/auth/loginThrottle.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { createTestApp, createTestAuth, createTestUser, provisionTenant } from '../../support/auth.ts';
import { normaliseEmail } from '../../../shared/email.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

describe.each([
  ['in memory', undefined],
  ['in Redis', 'redis'],
] as const)('when logins fail repeatedly (counters %s)', (_where, store) => {
  let app: FastifyInstance;
  let auth: AuthDeps;
  beforeAll(async () => {
    auth = await createTestAuth(db.pool, store === 'redis' ? { redisUrl: process.env.REDIS_URL } : {});
    app = await createTestApp(auth);
  });
  afterAll(async () => {
    await app?.close();
    await auth?.close();
  });

  const login = (slug: string, email: string, password: string) =>
    app.inject({ method: 'POST', url: '/v1/auth/login', headers: { 'x-tenant': slug }, payload: { email, password } });

  it(`refuses the account with 429 and Retry-After after ${LOGIN_FAILURE_LIMIT} failures, even with the right password`, async () => {
    const tenant = await provisionTenant(db.pool);
    const user = await createTestUser(db.pool, tenant, 'employee');
    for (let i = 0; i < LOGIN_FAILURE_LIMIT; i++) expect((await login(tenant.slug, user.email, 'wrong-password')).statusCode).toBe(401);
    const refused = await login(tenant.slug, user.email, user.password);
    expect(refused.statusCode).toBe(429);
    expect(Number(refused.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(Number(refused.headers['retry-after'])).toBeLessThanOrEqual(60);
    expect(refused.json()).toMatchObject({ type: '/problems/too-many-requests', status: 429 });
  });

  it('does not affect other accounts, of the same tenant or another', async () => {
    const tenant = await provisionTenant(db.pool);
    const [victim, bystander] = await Promise.all([
      createTestUser(db.pool, tenant, 'employee'),
      createTestUser(db.pool, tenant, 'employee'),
    ]);
    const elsewhere = await provisionTenant(db.pool);
    const sameEmailElsewhere = await createTestUser(db.pool, elsewhere, 'employee', { email: victim.email });
    for (let i = 0; i <= LOGIN_FAILURE_LIMIT; i++) await login(tenant.slug, victim.email, 'wrong-password');
    expect((await login(tenant.slug, victim.email, victim.password)).statusCode).toBe(429);
    expect((await login(tenant.slug, bystander.email, bystander.password)).statusCode).toBe(200);
    expect((await login(elsewhere.slug, victim.email, sameEmailElsewhere.password)).statusCode).toBe(200);
  });

  it('throttles unknown accounts the same way (no enumeration through the throttle)', async () => {
    const tenant = await provisionTenant(db.pool);
    for (let i = 0; i < LOGIN_FAILURE_LIMIT; i++)
      expect((await login(tenant.slug, 'ghost@example.test', 'x-password')).statusCode).toBe(401);
    expect((await login(tenant.slug, 'ghost@example.test', 'x-password')).statusCode).toBe(429);
  });

  it('a successful login clears the failures counted so far', async () => {
    const tenant = await provisionTenant(db.pool);
    const user = await createTestUser(db.pool, tenant, 'employee');
    for (let i = 0; i < LOGIN_FAILURE_LIMIT - 1; i++) await login(tenant.slug, user.email, 'wrong-password');
    expect((await login(tenant.slug, user.email, user.password)).statusCode).toBe(200);
    for (let i = 0; i < LOGIN_FAILURE_LIMIT - 1; i++) expect((await login(tenant.slug, user.email, 'wrong-password')).statusCode).toBe(401);
    expect((await login(tenant.slug, user.email, user.password)).statusCode).toBe(200);
  });
});

describe('when several gateways share Redis', () => {
  it('failures counted at one gateway throttle the account at the other', async () => {
    const keyPrefix = `test:login:${randomBytes(6).toString('hex')}`;
    const [authA, authB] = await Promise.all([
      createTestAuth(db.pool, { redisUrl: process.env.REDIS_URL, loginThrottle: { keyPrefix } }),
      createTestAuth(db.pool, { redisUrl: process.env.REDIS_URL, loginThrottle: { keyPrefix } }),
    ]);
    const [appA, appB] = await Promise.all([createTestApp(authA), createTestApp(authB)]);
    const redis = new Redis(process.env.REDIS_URL ?? '');
    try {
      const tenant = await provisionTenant(db.pool);
      const user = await createTestUser(db.pool, tenant, 'employee');
      const login = (app: FastifyInstance, password: string) =>
        app.inject({
          method: 'POST',
          url: '/v1/auth/login',
          headers: { 'x-tenant': tenant.slug },
          payload: { email: user.email, password },
        });
      for (let i = 0; i < LOGIN_FAILURE_LIMIT; i++) expect((await login(i % 2 ? appA : appB, 'wrong-password')).statusCode).toBe(401);
      expect((await login(appA, user.password)).statusCode).toBe(429);
      expect((await login(appB, user.password)).statusCode).toBe(429);
      // One counter per (account, address), per account and per address: three keys, all shared.
      expect(await redis.keys(`${keyPrefix}:pair*`)).toHaveLength(1);
      expect(await redis.keys(`${keyPrefix}*`)).toHaveLength(3);
    } finally {
      redis.disconnect();
      await Promise.all([appA.close(), appB.close()]);
      await Promise.all([authA.close(), authB.close()]);
    }
  });
});

describe('when counters are in Redis', () => {
  it('names them by a keyed hash: no plain SHA-256 of the account or the address finds them, and they still throttle', async () => {
    const keyPrefix = `test:login:${randomBytes(6).toString('hex')}`;
    const auth = await createTestAuth(db.pool, { redisUrl: process.env.REDIS_URL, loginThrottle: { keyPrefix } });
    const app = await createTestApp(auth);
    const redis = new Redis(process.env.REDIS_URL ?? '');
    try {
      const tenant = await provisionTenant(db.pool);
      const user = await createTestUser(db.pool, tenant, 'employee');
      const ip = '203.0.113.7';
      const login = (password: string) =>
        app.inject({
          method: 'POST',
          url: '/v1/auth/login',
          remoteAddress: ip,
          headers: { 'x-tenant': tenant.slug },
          payload: { email: user.email, password },
        });
      for (let i = 0; i < LOGIN_FAILURE_LIMIT; i++) expect((await login('wrong-password')).statusCode).toBe(401);
      expect((await login(user.password)).statusCode).toBe(429);

      const names = await redis.keys(`${keyPrefix}*`);
      expect(names).toHaveLength(3);
      // What someone holding a list of likely addresses would hash, as the throttle joins them.
      const account = `${tenant.slug}\n${normaliseEmail(user.email)}`;
      const guesses = [[account], [account, ip], [ip], [normaliseEmail(user.email)]].flatMap((parts) => {
        const digest = createHash('sha256').update(parts.join('\n'));
        return [digest.copy().digest('base64url'), digest.digest('hex')];
      });
      for (const name of names) {
        for (const guess of guesses) expect(name).not.toContain(guess);
        expect(name).not.toContain(user.email);
        expect(name).not.toContain(ip);
      }
    } finally {
      redis.disconnect();
      await app.close();
      await auth.close();
    }
  });
});
