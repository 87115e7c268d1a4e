import type { FastifyInstance } from 'fastify';
import { testEmailHash } from '../../support/personalData.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { BUILT_IN_ROLES, PERMISSIONS, ROLE_PERMISSIONS, rolesAllow, type RoleName } from '../../../services/auth/permissions.ts';
import { authenticated, type AuthDeps } from '../../../services/auth/plugin.ts';
import { analyticsRoutes } from '../../../services/analytics/routes.ts';
import { billingRoutes } from '../../../services/billing/routes.ts';
import { employeesCapability } from '../../../services/employees/capability.ts';
import { changesCapability } from '../../../services/changes/capability.ts';
import { webhooksCapability } from '../../../services/webhooks/capability.ts';
import { createSecretBox } from '../../../services/webhooks/secrets.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { authHeaders, createTestApp, createTestAuth, provisionTenant, type TestTenant } from '../../support/auth.ts';
import { testDataKeys } from '../../support/dataKeys.ts';

/**
 * Role × route, generated: the routes are whatever the authenticated scope registered (each
 * with its `config.permission`), the expectation is the permission matrix. A route added to a
 * mounted capability joins the matrix without a change here; mount new capabilities below.
 */
let db: TestDatabase;
let store: EventStore;
let auth: AuthDeps;
let app: FastifyInstance;
let tenant: TestTenant;

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  auth = await createTestAuth(db.pool);
  app = await createTestApp(
    auth,
    employeesCapability(
      { pool: db.pool, eventStore: store, log: store, logInDatabase: true, emailHash: testEmailHash, dataKeys: testDataKeys(db.pool) },
      { readWaitMs: 0 },
    ),
    analyticsRoutes({ pool: db.pool, store, readWaitMs: 0 }),
    billingRoutes({ store }),
    changesCapability({ pool: db.pool, databaseUrl: db.url }),
    webhooksCapability({ pool: db.pool, secrets: createSecretBox(Buffer.alloc(32, 1)), targets: { allowHosts: [] } }),
  );
  tenant = await provisionTenant(db.pool);
});
afterAll(async () => {
  await app?.close();
  await store?.close();
  await auth?.close();
  await db?.drop();
});

// Placeholders valid for any id format we use (ULID-shaped); an unknown id is a 404, not a 403.
const fillParams = (url: string) => url.replace(/:(\w+)/g, '01ARZ3NDEKTSV4RRFFQ69G5FAV');

describe('the permission matrix', () => {
  it('gives admin every permission and every other role roles:read', () => {
    expect([...ROLE_PERMISSIONS.admin].sort()).toEqual([...PERMISSIONS].sort());
    for (const role of BUILT_IN_ROLES) expect(ROLE_PERMISSIONS[role]).toContain('roles:read');
  });

  it('covers the routes of every mounted capability (the matrix below is not empty)', () => {
    const urls = new Set(auth.routes.map((r) => r.url));
    for (const url of [
      '/v1/roles',
      '/v1/employees',
      '/v1/analytics/kpi',
      '/v1/analytics/billing-events',
      '/v1/analytics/workforce/series',
      '/v1/employees/changes',
      '/v1/webhooks',
    ])
      expect(urls).toContain(url);
  });
});

describe('role × route', () => {
  const cells = () =>
    auth.routes.flatMap((route) => BUILT_IN_ROLES.map((role) => ({ ...route, role, allowed: rolesAllow([role], route.permission) })));

  it('every cell answers as the matrix says: 403 where the role lacks the permission, never 401/403 where it has it', async () => {
    const all = cells();
    expect(all.length).toBeGreaterThanOrEqual(BUILT_IN_ROLES.length * 8);
    const outcomes = await Promise.all(
      all.map(async (cell) => {
        const response = await app.inject({
          method: cell.method as 'GET',
          url: fillParams(cell.url),
          headers: await authHeaders(auth, tenant, cell.role),
          ...(['POST', 'PUT', 'PATCH'].includes(cell.method) ? { payload: {} } : {}),
        });
        return {
          cell: `${cell.role} ${cell.method} ${cell.url} (${cell.permission})`,
          allowed: cell.allowed,
          status: response.statusCode,
          body: response.body,
        };
      }),
    );
    for (const outcome of outcomes) {
      if (outcome.allowed) {
        expect([401, 403], `${outcome.cell}: ${outcome.body}`).not.toContain(outcome.status);
      } else {
        expect(outcome.status, `${outcome.cell}: ${outcome.body}`).toBe(403);
        if (outcome.status === 403 && outcome.body) expect(JSON.parse(outcome.body)).toMatchObject({ type: '/problems/forbidden' });
      }
    }
  });

  it.each(BUILT_IN_ROLES)('%s: GET /v1/roles lists the four built-in roles with uuid ids and their permissions', async (role: RoleName) => {
    const response = await app.inject({ method: 'GET', url: '/v1/roles', headers: await authHeaders(auth, tenant, role) });
    expect(response.statusCode).toBe(200);
    const { data } = response.json<{ data: Array<{ id: string; name: string; permissions: string[] }> }>();
    expect(data.map((r) => r.name)).toEqual([...BUILT_IN_ROLES]);
    for (const r of data) {
      expect(r.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
      expect(r.permissions).toEqual(ROLE_PERMISSIONS[r.name as RoleName]);
    }
  });

  it('a token with an unknown role gets nothing but 403s', async () => {
    const headers = await authHeaders(auth, tenant, ['superuser']);
    expect((await app.inject({ method: 'GET', url: '/v1/roles', headers })).statusCode).toBe(403);
  });
});

describe('when a route in the authenticated scope declares no permission', () => {
  it('the gateway refuses to start', async () => {
    const careless = async (v1: FastifyInstance) => {
      v1.get('/careless', async () => ({ ok: true }));
    };
    const other = await createTestAuth(db.pool);
    await expect(createTestApp(other, careless)).rejects.toThrow(/declares no valid config.permission/);
    await other.close();
  });
});

describe('the authenticated scope', () => {
  it('exposes the caller to capabilities as request.auth, with the tenant plan', async () => {
    // Own deps: the routes it registers must not join the matrix above.
    const own = await createTestAuth(db.pool);
    const whoami = authenticated(own, async (v1) => {
      v1.get('/whoami', { config: { permission: 'roles:read' } }, async (request) => request.auth);
    });
    const probe = await createTestApp(own, whoami);
    try {
      const userId = crypto.randomUUID();
      const response = await probe.inject({ method: 'GET', url: '/v1/whoami', headers: await authHeaders(own, tenant, 'analyst', userId) });
      expect(response.json()).toEqual({
        tenantId: tenant.tenantId,
        tenantSlug: tenant.slug,
        plan: 'pro',
        rateLimitOverride: null,
        userId,
        roles: ['analyst'],
      });
    } finally {
      await probe.close();
      await own.close();
    }
  });
});
