import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { createTestApp, createTestAuth, loginAs, provisionTenant } from '../../support/auth.ts';

/**
 * Regression: docs/versioning.md says request bodies are strict (an unknown field is a 400), but
 * login, refresh and logout accepted unknown fields and dropped them.
 */
let db: TestDatabase;
let auth: AuthDeps;
let app: FastifyInstance;

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

type Problem = { status: number; errors?: { path: string; message: string }[] };

const expect400Naming = (response: { statusCode: number; headers: Record<string, unknown>; json<T>(): T }, field: string) => {
  expect(response.statusCode).toBe(400);
  expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
  expect(JSON.stringify(response.json<Problem>().errors)).toContain(field);
};

describe('when an auth body carries a field the API does not define', () => {
  it('login, refresh and logout answer 400 naming it; without it they work', async () => {
    const tenant = await provisionTenant(db.pool);
    const user = await loginAs(app, db.pool, tenant, 'employee');
    const publicHeaders = { 'x-tenant': tenant.slug };

    const login = await app.inject({
      method: 'POST',
      url: '/v1/auth/login',
      headers: publicHeaders,
      payload: { email: user.email, password: user.password, rememberMe: true },
    });
    expect400Naming(login, 'rememberMe');

    const refresh = await app.inject({
      method: 'POST',
      url: '/v1/auth/refresh',
      headers: publicHeaders,
      payload: { refreshToken: user.refreshToken, scope: 'all' },
    });
    expect400Naming(refresh, 'scope');

    const logout = await app.inject({
      method: 'POST',
      url: '/v1/auth/logout',
      headers: user.headers,
      payload: { refreshToken: user.refreshToken, everywhere: true },
    });
    expect400Naming(logout, 'everywhere');

    // The refused calls changed nothing: the refresh token is still good, once.
    const refreshed = await app.inject({
      method: 'POST',
      url: '/v1/auth/refresh',
      headers: publicHeaders,
      payload: { refreshToken: user.refreshToken },
    });
    expect(refreshed.statusCode).toBe(200);
    const { refreshToken } = refreshed.json<{ refreshToken: string }>();
    const loggedOut = await app.inject({ method: 'POST', url: '/v1/auth/logout', headers: user.headers, payload: { refreshToken } });
    expect(loggedOut.statusCode).toBe(204);
  });
});
