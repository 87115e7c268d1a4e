import type { FastifyInstance } from 'fastify';
import { testEmailHash } from '../../support/personalData.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { employeesCapability } from '../../../services/employees/capability.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { authHeaders, createTestApp, createTestAuth, provisionTenant } from '../../support/auth.ts';
import { testDataKeys } from '../../support/dataKeys.ts';

/**
 * Found by the OpenAPI fuzz test: a gateway started on a fresh database before any projector
 * created the employees read model answered list reads with 500. Not built yet is "not ready":
 * 503 with Retry-After, like any dependency that is not there yet.
 */
describe('when the read model has not been built yet (no projector ran)', () => {
  let db: TestDatabase;
  let store: EventStore;
  let auth: AuthDeps;
  let app: FastifyInstance;
  beforeAll(async () => {
    db = await createTestDatabase();
    store = createPostgresEventStore(db.pool, { listenUrl: db.url });
    auth = await createTestAuth(db.pool);
    app = await createTestApp(
      auth,
      employeesCapability({
        pool: db.pool,
        eventStore: store,
        log: store,
        logInDatabase: true,
        emailHash: testEmailHash,
        dataKeys: testDataKeys(db.pool),
      }),
    );
  });
  afterAll(async () => {
    await app?.close();
    await auth?.close();
    await store?.close();
    await db?.drop();
  });

  it('answers a list read with 503 and Retry-After, not 500', async () => {
    const headers = await authHeaders(auth, await provisionTenant(db.pool), 'hr_manager');
    const response = await app.inject({ method: 'GET', url: '/v1/employees', headers });
    expect(response.statusCode, response.body).toBe(503);
    expect(response.headers['retry-after']).toBe('5');
    expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(response.body).not.toMatch(/relation|employees_/);
  });

  it('sends no X-Consistency with that 503, though the read waited for X-Min-Position first', async () => {
    const headers = await authHeaders(auth, await provisionTenant(db.pool), 'hr_manager');
    // No projector: the wait runs out (stale), then the read finds no read model.
    const response = await app.inject({ method: 'GET', url: '/v1/employees', headers: { ...headers, 'x-min-position': '1-1' } });
    expect(response.statusCode, response.body).toBe(503);
    expect(response.headers['x-consistency']).toBeUndefined();
  });
});
