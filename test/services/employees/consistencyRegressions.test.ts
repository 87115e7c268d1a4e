import type { FastifyInstance } from 'fastify';
import { testEmailHash } from '../../support/personalData.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { authHeaders, createTestApp, createTestAuth, provisionTenant } from '../../support/auth.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { type EventStore, parsePosition } from '../../../shared/event-store/port.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { employeesProjection } from '../../../projections/employees/employeesProjection.ts';
import { employeesCapability } from '../../../services/employees/capability.ts';
import type { Employee } from '../../support/harness/employeesApi.ts';
import { waitFor } from '../../support/waitFor.ts';
import { testDataKeys } from '../../support/dataKeys.ts';

/**
 * Two consistency regressions (a failed PATCH kept an email reserved; a single read answered
 * a stale ETag from the lagging read model), through the API on real PostgreSQL. The projector is started and
 * stopped by the tests themselves, so "the read model lags" is a state they set up, not a race.
 */

let db: TestDatabase;
let store: EventStore;
let auth: AuthDeps;
let app: FastifyInstance;
let projector: ProjectorHandle | undefined;

const startProjector = () => {
  projector = runProjection(db.pool, store, employeesProjection, { pollIntervalMs: 50 });
};

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  startProjector();
  await waitFor(() => readCheckpoint(db.pool, employeesProjection.name));
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
  await projector?.stop();
  await auth?.close();
  await store?.close();
  await db?.drop();
});

let counter = 0;
const uniqueEmail = (prefix: string) => `${prefix}-${Date.now().toString(36)}-${counter++}@example.test`;

async function freshTenant() {
  const tenant = await provisionTenant(db.pool);
  return authHeaders(auth, tenant, 'hr_manager');
}

async function hire(headers: Record<string, string>, email: string) {
  return app.inject({ method: 'POST', url: '/v1/employees', headers, payload: { email, firstName: 'Xena', lastName: 'Example' } });
}

describe('a failed PATCH frees an email (reservations are released only by the call that made them)', () => {
  it('a PATCH of X to its own address with a stale If-Match answers 412 and X keeps the address: hiring Y with it is 409', async () => {
    const headers = await freshTenant();
    const email = uniqueEmail('dup');
    const x = await hire(headers, email);
    expect(x.statusCode, x.body).toBe(201);
    const id = x.json<Employee>().id;
    // Move X on once, so that revision 0 is stale.
    const renamed = await app.inject({ method: 'PATCH', url: `/v1/employees/${id}`, headers, payload: { lastName: 'Moved' } });
    expect(renamed.statusCode, renamed.body).toBe(200);

    const stale = await app.inject({
      method: 'PATCH',
      url: `/v1/employees/${id}`,
      headers: { ...headers, 'if-match': '"0"' },
      payload: { email, firstName: 'Xavier' },
    });
    expect(stale.statusCode, stale.body).toBe(412);

    const y = await hire(headers, email.toUpperCase());
    expect(y.statusCode, y.body).toBe(409);
  });

  it('a failed PATCH that did reserve a new address gives that address back', async () => {
    const headers = await freshTenant();
    const x = await hire(headers, uniqueEmail('x'));
    const id = x.json<Employee>().id;
    await app.inject({ method: 'PATCH', url: `/v1/employees/${id}`, headers, payload: { lastName: 'Moved' } });
    const wanted = uniqueEmail('wanted');
    const stale = await app.inject({
      method: 'PATCH',
      url: `/v1/employees/${id}`,
      headers: { ...headers, 'if-match': '"0"' },
      payload: { email: wanted },
    });
    expect(stale.statusCode, stale.body).toBe(412);
    const y = await hire(headers, wanted);
    expect(y.statusCode, y.body).toBe(201);
  });
});

describe('no stale ETag on single reads (GET answers from the stream)', () => {
  it('while the read model lags, GET shows every acknowledged write and its ETag lets the next PATCH through', async () => {
    const headers = await freshTenant();
    const created = await hire(headers, uniqueEmail('lag'));
    expect(created.statusCode, created.body).toBe(201);
    const id = created.json<Employee>().id;
    const position = parsePosition(String(created.headers['x-log-position']));
    if (!position) throw new Error('no log position on the create');
    expect(await waitForCheckpoint(db.pool, employeesProjection.name, position, 10_000)).toBe(true);

    // The read model now holds revision 0 and stops following the log.
    await projector?.stop();
    try {
      const patched = await app.inject({
        method: 'PATCH',
        url: `/v1/employees/${id}`,
        headers,
        payload: { firstName: 'Xavier', department: 'ops' },
      });
      expect(patched.statusCode, patched.body).toBe(200);
      expect(patched.headers.etag).toBe('"1"');

      const read = await app.inject({ method: 'GET', url: `/v1/employees/${id}`, headers });
      expect(read.statusCode, read.body).toBe(200);
      expect(read.headers.etag).toBe('"1"');
      expect(read.json<Employee>()).toEqual(patched.json<Employee>());

      const next = await app.inject({
        method: 'PATCH',
        url: `/v1/employees/${id}`,
        headers: { ...headers, 'if-match': String(read.headers.etag) },
        payload: { lastName: 'Again' },
      });
      expect(next.statusCode, next.body).toBe(200);
      expect(next.headers.etag).toBe('"2"');
    } finally {
      startProjector();
    }
  });

  it("GET-then-PATCH with the GET's ETag never gets a spurious 412, write after write", async () => {
    const headers = await freshTenant();
    const id = (await hire(headers, uniqueEmail('loop'))).json<Employee>().id;
    for (let i = 0; i < 15; i++) {
      const read = await app.inject({ method: 'GET', url: `/v1/employees/${id}`, headers });
      expect(read.headers.etag).toBe(`"${i}"`);
      const patched = await app.inject({
        method: 'PATCH',
        url: `/v1/employees/${id}`,
        headers: { ...headers, 'if-match': String(read.headers.etag) },
        payload: { firstName: `Name${i}` },
      });
      expect(patched.statusCode, patched.body).toBe(200);
    }
  });

  it("still answers 404 for an unknown id and for another tenant's employee", async () => {
    const headers = await freshTenant();
    const id = (await hire(headers, uniqueEmail('mine'))).json<Employee>().id;
    const other = await freshTenant();
    expect((await app.inject({ method: 'GET', url: `/v1/employees/${id}`, headers: other })).statusCode).toBe(404);
    expect((await app.inject({ method: 'GET', url: '/v1/employees/01JNGZ0000000000000000000A', headers })).statusCode).toBe(404);
  });
});
