import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql, withTenant } from '../../../shared/db/pool.ts';
import { normaliseEmail } from '../../../shared/email.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { parsePosition, type EventStore } from '../../../shared/event-store/port.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { parkEvent } from '../../../shared/projections/parking.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { roleAssignmentReactor } from '../../../services/auth/roleAssignmentReactor.ts';
import { listRoles } from '../../../services/auth/roles.ts';
import { employeesCapability } from '../../../services/employees/capability.ts';
import { employeeStreamId } from '../../../services/employees/contract.ts';
import { authHeaders, createTestApp, createTestAuth, provisionTenant, type TestTenant } from '../../support/auth.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { sealedEventStore, testEmailHash } from '../../support/personalData.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * An erasure forgets every login the person was given a role on, and the role reactor never makes
 * one for them after it: not when it was stopped while a role was assigned and the person erased,
 * not for an address the person held earlier.
 */
let db: TestDatabase;
let inner: EventStore;
let store: EventStore;
let auth: AuthDeps;
let app: FastifyInstance;
let reactor: ProjectorHandle | undefined;

const startReactor = async () => {
  reactor = runProjection(db.pool, store, roleAssignmentReactor, { pollIntervalMs: 50 });
  await waitFor(() => readCheckpoint(db.pool, roleAssignmentReactor.name));
};

beforeAll(async () => {
  db = await createTestDatabase();
  inner = createPostgresEventStore(db.pool, { listenUrl: db.url });
  const sealed = sealedEventStore(inner, db.pool);
  store = sealed.store;
  await startReactor();
  auth = await createTestAuth(db.pool);
  app = await createTestApp(
    auth,
    employeesCapability({
      pool: db.pool,
      eventStore: store,
      log: inner,
      logInDatabase: true,
      emailHash: testEmailHash,
      dataKeys: sealed.keys,
    }),
  );
});
afterAll(async () => {
  await app?.close();
  await reactor?.stop();
  await auth?.close();
  await store?.close();
  await db?.drop();
});

const reactorAt = async (response: { headers: Record<string, unknown> }) => {
  const at = parsePosition(String(response.headers['x-log-position']));
  if (!at) throw new Error('no position');
  expect(await waitForCheckpoint(db.pool, roleAssignmentReactor.name, at, 10_000)).toBe(true);
};

const login = (tenant: TestTenant, id: string) =>
  withTenant(db.pool, tenant.tenantId, (tx) =>
    tx.maybeOne(
      sql.type(z.object({ email: z.string(), disabled: z.boolean() }))`
        select email, disabled_at is not null as disabled from users where tenant_id = ${tenant.tenantId} and id = ${id}`,
    ),
  );

const loginAt = (tenant: TestTenant, email: string) =>
  withTenant(db.pool, tenant.tenantId, (tx) =>
    tx.maybeOneFirst(
      sql.type(
        z.object({ id: z.string() }),
      )`select id::text from users where tenant_id = ${tenant.tenantId} and email_key = ${normaliseEmail(email)}`,
    ),
  );

async function setUp() {
  const tenant = await provisionTenant(db.pool);
  const headers = await authHeaders(auth, tenant, 'admin');
  const roles = await withTenant(db.pool, tenant.tenantId, (tx) => listRoles(tx, tenant.tenantId));
  const roleId = roles.find((r) => r.name === 'employee')?.id;
  const tag = randomBytes(6).toString('hex');
  return { tenant, headers, roleId, address: (n: string) => `${n}${tag}@logins-${tag}.example` };
}

describe('an erasure and the logins made for the person', () => {
  it('gives no login to an erased person whose role the reactor applies only after the erasure', async () => {
    const { tenant, headers, roleId, address } = await setUp();
    const email = address('late');
    const hired = await app.inject({
      method: 'POST',
      url: '/v1/employees',
      headers,
      payload: { email, firstName: 'Late', lastName: 'Role' },
    });
    expect(hired.statusCode, hired.body).toBe(201);
    await reactorAt(hired); // the reactor knows the address
    const id = hired.json<{ id: string }>().id;

    await reactor?.stop();
    reactor = undefined;
    const assigned = await app.inject({ method: 'PUT', url: `/v1/employees/${id}/role`, headers, payload: { roleId } });
    expect(assigned.statusCode, assigned.body).toBe(200);
    const erased = await app.inject({ method: 'POST', url: `/v1/employees/${id}/erasure`, headers });
    expect(erased.statusCode, erased.body).toBe(200);
    await startReactor();
    await reactorAt(erased);

    expect(await loginAt(tenant, email)).toBeNull();
  });

  it('forgets the login made under an address the person held before', async () => {
    const { tenant, headers, roleId, address } = await setUp();
    const [first, second] = [address('first'), address('second')];
    const hired = await app.inject({
      method: 'POST',
      url: '/v1/employees',
      headers,
      payload: { email: first, firstName: 'Moved', lastName: 'Address', roleId },
    });
    expect(hired.statusCode, hired.body).toBe(201);
    await reactorAt(hired);
    const userId = await loginAt(tenant, first);
    expect(userId).not.toBeNull();
    const id = hired.json<{ id: string }>().id;
    const moved = await app.inject({ method: 'PATCH', url: `/v1/employees/${id}`, headers, payload: { email: second } });
    expect(moved.statusCode, moved.body).toBe(200);
    await reactorAt(moved);

    const erased = await app.inject({ method: 'POST', url: `/v1/employees/${id}/erasure`, headers });
    expect(erased.statusCode, erased.body).toBe(200);
    // In the erasure's own transaction, not only once the reactor meets it.
    expect(await login(tenant, userId!)).toEqual({ email: `erased-${userId}@erased.invalid`, disabled: true });
    await reactorAt(erased);

    const { stdout } = await promisify(execFile)('pg_dump', ['--dbname', db.url, '--no-owner'], { maxBuffer: 512 * 1024 * 1024 });
    expect([first, second].filter((a) => stdout.toLowerCase().includes(a.toLowerCase()))).toEqual([]);
  });

  it('blanks an event of the person parked after the erasure committed, when a projection applies the erasure', async () => {
    const { tenant, headers, address } = await setUp();
    const email = address('parked');
    const hired = await app.inject({
      method: 'POST',
      url: '/v1/employees',
      headers,
      payload: { email, firstName: 'Parked', lastName: 'Late' },
    });
    expect(hired.statusCode, hired.body).toBe(201);
    await reactorAt(hired);
    const id = hired.json<{ id: string }>().id;
    await reactor?.stop();
    reactor = undefined;
    const erased = await app.inject({ method: 'POST', url: `/v1/employees/${id}/erasure`, headers });
    expect(erased.statusCode, erased.body).toBe(200);
    // Another projection opened the hire on a page read before the key went, and parks it only now.
    const [hire] = await inner.readStream(employeeStreamId(tenant.tenantId, id));
    await parkEvent(
      db.pool,
      { name: 'late-parker', version: 1 },
      { ...hire!, data: { ...(hire!.data as object), email } },
      {
        error: 'injected',
        attempts: 1,
      },
    );
    await startReactor();
    await reactorAt(erased);

    const parked = await db.pool.oneFirst(
      sql.type(
        z.object({ data: z.record(z.string(), z.unknown()) }),
      )`select data from projection_parked_events where projection = 'late-parker'`,
    );
    expect(parked).toMatchObject({ employeeId: id, email: null, firstName: null, lastName: null });
  });
});
