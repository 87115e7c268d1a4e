import type { FastifyInstance } from 'fastify';
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql, withTenant } from '../../../shared/db/pool.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { hashRefreshToken, REFRESH_TOKEN_TTL_SECONDS } from '../../../services/auth/refreshTokens.ts';
import { disableUser } from '../../../services/auth/users.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { createTestApp, createTestAuth, createTestUser, provisionTenant } from '../../support/auth.ts';

let db: TestDatabase;
let app: FastifyInstance;
let auth: AuthDeps;

beforeAll(async () => {
  db = await createTestDatabase();
  auth = await createTestAuth(db.pool);
  app = await createTestApp(auth);
});
afterAll(async () => {
  await app?.close();
  await auth?.close();
  await db?.drop();
});

const post = (url: string, slug: string | undefined, payload: unknown) =>
  app.inject({ method: 'POST', url, headers: slug ? { 'x-tenant': slug } : {}, payload: payload as Record<string, unknown> });
const login = (slug: string | undefined, email: string, password: string) => post('/v1/auth/login', slug, { email, password });
const refresh = (slug: string, refreshToken: string) => post('/v1/auth/refresh', slug, { refreshToken });

const tokenPair = z.object({
  accessToken: z.string(),
  tokenType: z.literal('Bearer'),
  expiresIn: z.literal(900),
  refreshToken: z.string().min(40),
  refreshExpiresIn: z.literal(REFRESH_TOKEN_TTL_SECONDS),
});

async function freshUser(role: 'admin' | 'hr_manager' | 'analyst' | 'employee' = 'hr_manager') {
  const tenant = await provisionTenant(db.pool);
  return { tenant, ...(await createTestUser(db.pool, tenant, role)) };
}

describe('when logging in', () => {
  it('with the right password: 200 with a token pair whose access token names the user, tenant and role', async () => {
    const { tenant, userId, email, password } = await freshUser('analyst');
    const response = await login(tenant.slug, email.toUpperCase(), password);
    expect(response.statusCode).toBe(200);
    expect(response.headers['cache-control']).toBe('no-store');
    const body = tokenPair.parse(response.json());
    expect(decodeJwt(body.accessToken)).toMatchObject({ sub: userId, tenant: tenant.slug, roles: ['analyst'] });
    const roles = await app.inject({
      method: 'GET',
      url: '/v1/roles',
      headers: { authorization: `Bearer ${body.accessToken}`, 'x-tenant': tenant.slug },
    });
    expect(roles.statusCode).toBe(200);
  });

  it('unknown tenant, unknown e-mail and wrong password get the same 401', async () => {
    const { tenant, email, password } = await freshUser();
    const answers = await Promise.all([
      login('no-such-tenant', email, password),
      login(tenant.slug, 'nobody@example.test', password),
      login(tenant.slug, email, `${password}x`),
    ]);
    const shapes = answers.map((r) => {
      const { requestId: _r, ...problem } = r.json<Record<string, unknown>>();
      return { status: r.statusCode, problem };
    });
    expect(shapes[0]).toEqual({
      status: 401,
      problem: {
        type: '/problems/unauthorized',
        title: 'Unauthorized',
        status: 401,
        detail: expect.any(String),
        instance: '/v1/auth/login',
      },
    });
    expect(shapes[1]).toEqual(shapes[0]);
    expect(shapes[2]).toEqual(shapes[0]);
  });

  it('without X-Tenant: 400', async () => {
    expect((await login(undefined, 'a@example.test', 'whatever1')).statusCode).toBe(400);
  });

  it('as a disabled user: 401, and existing refresh tokens stop working', async () => {
    const { tenant, email, password } = await freshUser();
    const first = tokenPair.parse((await login(tenant.slug, email, password)).json());
    await withTenant(db.pool, tenant.tenantId, (tx) => disableUser(tx, tenant.tenantId, email));
    expect((await login(tenant.slug, email, password)).statusCode).toBe(401);
    expect((await refresh(tenant.slug, first.refreshToken)).statusCode).toBe(401);
  });
});

describe('when refreshing', () => {
  it('rotates: a new pair, and the refresh token used is spent', async () => {
    const { tenant, userId, email, password } = await freshUser();
    const first = tokenPair.parse((await login(tenant.slug, email, password)).json());
    const second = await refresh(tenant.slug, first.refreshToken);
    expect(second.statusCode).toBe(200);
    const pair = tokenPair.parse(second.json());
    expect(pair.refreshToken).not.toBe(first.refreshToken);
    expect(decodeJwt(pair.accessToken)).toMatchObject({ sub: userId, tenant: tenant.slug, roles: ['hr_manager'] });
    // The successor works once too.
    expect((await refresh(tenant.slug, pair.refreshToken)).statusCode).toBe(200);
  });

  it('reuse of a rotated token revokes the whole family (the successor too): 401', async () => {
    const { tenant, email, password } = await freshUser();
    const first = tokenPair.parse((await login(tenant.slug, email, password)).json());
    const second = tokenPair.parse((await refresh(tenant.slug, first.refreshToken)).json());
    const reuse = await refresh(tenant.slug, first.refreshToken);
    expect(reuse.statusCode).toBe(401);
    expect(reuse.json()).toMatchObject({ type: '/problems/unauthorized' });
    expect((await refresh(tenant.slug, second.refreshToken)).statusCode).toBe(401);
    // Another session of the same user is untouched.
    const other = tokenPair.parse((await login(tenant.slug, email, password)).json());
    expect((await refresh(tenant.slug, other.refreshToken)).statusCode).toBe(200);
  });

  it('two concurrent uses of one token: exactly one succeeds, and the family ends revoked', async () => {
    const { tenant, email, password } = await freshUser();
    const first = tokenPair.parse((await login(tenant.slug, email, password)).json());
    const results = await Promise.all([refresh(tenant.slug, first.refreshToken), refresh(tenant.slug, first.refreshToken)]);
    expect(results.map((r) => r.statusCode).sort()).toEqual([200, 401]);
    const winner = tokenPair.parse(results.find((r) => r.statusCode === 200)?.json());
    expect((await refresh(tenant.slug, winner.refreshToken)).statusCode).toBe(401);
  });

  it('with an unknown token, or at another tenant: 401', async () => {
    const { tenant, email, password } = await freshUser();
    const other = await provisionTenant(db.pool);
    const pair = tokenPair.parse((await login(tenant.slug, email, password)).json());
    expect((await refresh(tenant.slug, 'not-a-token')).statusCode).toBe(401);
    expect((await refresh(other.slug, pair.refreshToken)).statusCode).toBe(401);
    expect((await refresh(tenant.slug, pair.refreshToken)).statusCode).toBe(200);
  });

  it('stores refresh tokens only as sha256 digests, never in clear', async () => {
    const { tenant, email, password } = await freshUser();
    const first = tokenPair.parse((await login(tenant.slug, email, password)).json());
    const second = tokenPair.parse((await refresh(tenant.slug, first.refreshToken)).json());
    const rows = await db.pool.any(sql.type(z.object({ row: z.string(), token_hash: z.string() }))`
      select t::text as row, token_hash from refresh_tokens t where tenant_id = ${tenant.tenantId}
    `);
    expect(rows).toHaveLength(2);
    for (const { row } of rows) {
      expect(row).not.toContain(first.refreshToken);
      expect(row).not.toContain(second.refreshToken);
    }
    expect(rows.map((r) => r.token_hash).sort()).toEqual(
      [hashRefreshToken(first.refreshToken), hashRefreshToken(second.refreshToken)].sort(),
    );
  });
});

describe('when logging out', () => {
  const logout = (slug: string | undefined, accessToken: string | undefined, refreshToken: string) =>
    app.inject({
      method: 'POST',
      url: '/v1/auth/logout',
      headers: { ...(slug ? { 'x-tenant': slug } : {}), ...(accessToken ? { authorization: `Bearer ${accessToken}` } : {}) },
      payload: { refreshToken },
    });

  it('204, and the refresh token and its successors of that session are revoked', async () => {
    const { tenant, email, password } = await freshUser();
    const first = tokenPair.parse((await login(tenant.slug, email, password)).json());
    const second = tokenPair.parse((await refresh(tenant.slug, first.refreshToken)).json());
    const response = await logout(tenant.slug, second.accessToken, second.refreshToken);
    expect(response.statusCode).toBe(204);
    expect(response.body).toBe('');
    expect((await refresh(tenant.slug, second.refreshToken)).statusCode).toBe(401);
  });

  it('needs the bearer token like every /v1 route but login and refresh', async () => {
    const { tenant, email, password } = await freshUser();
    const pair = tokenPair.parse((await login(tenant.slug, email, password)).json());
    const response = await logout(tenant.slug, undefined, pair.refreshToken);
    expect(response.statusCode).toBe(401);
    expect(response.headers['www-authenticate']).toMatch(/^Bearer/);
    expect((await refresh(tenant.slug, pair.refreshToken)).statusCode).toBe(200);
  });

  it("cannot end someone else's session, and says nothing about it", async () => {
    const alice = await freshUser();
    const mallory = { tenant: alice.tenant, ...(await createTestUser(db.pool, alice.tenant, 'employee')) };
    const alicePair = tokenPair.parse((await login(alice.tenant.slug, alice.email, alice.password)).json());
    const malloryPair = tokenPair.parse((await login(mallory.tenant.slug, mallory.email, mallory.password)).json());
    expect((await logout(alice.tenant.slug, malloryPair.accessToken, alicePair.refreshToken)).statusCode).toBe(204);
    expect((await refresh(alice.tenant.slug, alicePair.refreshToken)).statusCode).toBe(200);
  });

  it('is idempotent: an unknown or already revoked token also gets 204', async () => {
    const { tenant, email, password } = await freshUser();
    const pair = tokenPair.parse((await login(tenant.slug, email, password)).json());
    expect((await logout(tenant.slug, pair.accessToken, 'unknown')).statusCode).toBe(204);
    expect((await logout(undefined, pair.accessToken, 'unknown')).statusCode).toBe(400);
  });
});
