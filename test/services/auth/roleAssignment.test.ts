import type { FastifyInstance } from 'fastify';
import { testEmailHash } from '../../support/personalData.ts';
import { decodeJwt } from 'jose';
import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql, withTenant } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { retryParkedEvents } from '../../../shared/projections/parking.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { roleAssignmentReactor } from '../../../services/auth/roleAssignmentReactor.ts';
import { listRoles } from '../../../services/auth/roles.ts';
import { findUserByEmail, setUserRole } from '../../../services/auth/users.ts';
import { employeesCapability } from '../../../services/employees/capability.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { authHeaders, createTestApp, createTestAuth, createTestUser, provisionTenant, type TestTenant } from '../../support/auth.ts';
import { expectProblem } from '../../support/harness/employees.ts';
import { waitFor } from '../../support/waitFor.ts';
import { testDataKeys } from '../../support/dataKeys.ts';

/**
 * Role assignment is a reaction to the employee's `EmployeeRoleAssigned`
 * (the role reactor on the projection runner), not a call after the append. Real PostgreSQL; a
 * trigger makes writes to `users` fail on demand, so "the first attempt failed" is a fact.
 */
let db: TestDatabase;
let store: EventStore;
let auth: AuthDeps;
let app: FastifyInstance;
let reactor: ProjectorHandle;
const reactorErrors: unknown[] = [];
const parked: string[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  // `errcode` decides how the runner sees the failure: a lock timeout (55P03) is transient (the
  // page is retried until it applies), a raised exception (P0001) is deterministic (parked).
  await db.pool.query(sql.unsafe`create table test_fail_user_writes (errcode text not null)`);
  await db.pool.query(sql.unsafe`grant select on test_fail_user_writes to eas_tenant`);
  await db.pool.query(sql.unsafe`create sequence test_failed_user_writes`);
  await db.pool.query(sql.unsafe`grant usage on sequence test_failed_user_writes to eas_tenant`);
  await db.pool.query(sql.unsafe`
    create function test_fail_user_writes() returns trigger language plpgsql as $$
    begin
      declare code text;
      begin
        select errcode into code from test_fail_user_writes limit 1;
        if code is not null then
          perform nextval('test_failed_user_writes'); -- not rolled back: counts the attempts
          raise exception 'injected failure: users is unavailable' using errcode = code;
        end if;
        return new;
      end;
    end $$`);
  await db.pool.query(sql.unsafe`
    create trigger test_fail_user_writes before insert or update on users for each row execute function test_fail_user_writes()`);
  reactor = runProjection(db.pool, store, roleAssignmentReactor, {
    pollIntervalMs: 50,
    onError: (error) => reactorErrors.push(error),
    onParked: (event) => parked.push(event.streamId),
  });
  await waitFor(() => readCheckpoint(db.pool, roleAssignmentReactor.name));
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
  await reactor?.stop();
  await auth?.close();
  await store?.close();
  await db?.drop();
});

let counter = 0;
const uniqueEmail = (prefix: string) => `${prefix}-${Date.now().toString(36)}-${counter++}@example.test`;

async function roleIds(tenant: TestTenant) {
  const roles = await withTenant(db.pool, tenant.tenantId, (tx) => listRoles(tx, tenant.tenantId));
  const id = (name: string) => {
    const role = roles.find((r) => r.name === name);
    if (!role) throw new Error(`no role ${name}`);
    return role.id;
  };
  return { admin: id('admin'), analyst: id('analyst'), hrManager: id('hr_manager'), employee: id('employee') };
}

const roleOf = async (tenant: TestTenant, email: string) =>
  (await withTenant(db.pool, tenant.tenantId, (tx) => findUserByEmail(tx, tenant.tenantId, email)))?.role;

async function hire(headers: Record<string, string>, body: Record<string, unknown>) {
  return app.inject({ method: 'POST', url: '/v1/employees', headers, payload: { firstName: 'Rui', lastName: 'Role', ...body } });
}

const countUsers = (tenant: TestTenant, email: string) =>
  withTenant(db.pool, tenant.tenantId, (tx) =>
    tx.oneFirst(sql.type(z.object({ n: z.number() }))`select count(*)::int as n from users where email_key = ${email.toLowerCase()}`),
  );

describe('role assignment after the append (regression: it was a call that could fail after the event was stored)', () => {
  describe('when applying the role fails for good (a deterministic failure)', () => {
    it('the event is parked, and `projections retry` applies it after the fix', async () => {
      const tenant = await provisionTenant(db.pool);
      const admin = await authHeaders(auth, tenant, 'admin');
      const { hrManager } = await roleIds(tenant);
      const email = uniqueEmail('parked');
      await db.pool.query(sql.unsafe`insert into test_fail_user_writes values ('P0001')`);
      try {
        const created = await hire(admin, { email, roleId: hrManager });
        expect(created.statusCode, created.body).toBe(201);
        const stream = `employee-${tenant.tenantId}-${created.json<{ id: string }>().id}`;
        await waitFor(async () => parked.includes(stream));
        expect(await roleOf(tenant, email)).toBeUndefined();
      } finally {
        await db.pool.query(sql.unsafe`delete from test_fail_user_writes`);
      }
      const result = await retryParkedEvents(db.pool, roleAssignmentReactor, {
        role_reactor_emails: sql.identifier(['role_reactor_emails']),
        role_reactor_logins: sql.identifier(['role_reactor_logins']),
      });
      expect(result.stillParked).toBe(0);
      expect(await roleOf(tenant, email)).toBe('hr_manager');
      expect(await countUsers(tenant, email)).toBe(1);
    });
  });

  describe('when the reactor applies events again (retried page, full replay)', () => {
    it('does not duplicate the user and does not undo a later change of the role', async () => {
      const tenant = await provisionTenant(db.pool);
      const admin = await authHeaders(auth, tenant, 'admin');
      const { analyst } = await roleIds(tenant);
      const email = uniqueEmail('replayed');
      expect((await hire(admin, { email, roleId: analyst })).statusCode).toBe(201);
      await waitFor(async () => (await roleOf(tenant, email)) === 'analyst');
      // An operator changes the role afterwards (ops users set-role).
      await withTenant(db.pool, tenant.tenantId, (tx) => setUserRole(tx, tenant.tenantId, email, 'employee'));

      await replayProjection(db.pool, store, roleAssignmentReactor);
      expect(await countUsers(tenant, email)).toBe(1);
      expect(await roleOf(tenant, email)).toBe('employee');
    });
  });
});

describe('PUT /v1/employees/{id}/role', () => {
  async function employeeWithLogin() {
    const tenant = await provisionTenant(db.pool);
    const admin = await authHeaders(auth, tenant, 'admin');
    const user = await createTestUser(db.pool, tenant, 'employee');
    const created = await hire(admin, { email: user.email });
    expect(created.statusCode, created.body).toBe(201);
    return { tenant, admin, user, employeeId: created.json<{ id: string }>().id, roles: await roleIds(tenant) };
  }

  it("sets the person's role: the login's next token carries it", async () => {
    const { tenant, admin, user, employeeId, roles } = await employeeWithLogin();
    const response = await app.inject({
      method: 'PUT',
      url: `/v1/employees/${employeeId}/role`,
      headers: admin,
      payload: { roleId: roles.hrManager },
    });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toEqual({ employeeId, roleId: roles.hrManager });
    expect(response.headers.etag).toBe('"1"');
    expect(response.headers['x-log-position']).toBeTruthy();
    await waitFor(async () => (await roleOf(tenant, user.email)) === 'hr_manager');

    const login = await app.inject({
      method: 'POST',
      url: '/v1/auth/login',
      headers: { 'x-tenant': tenant.slug },
      payload: { email: user.email, password: user.password },
    });
    expect(login.statusCode, login.body).toBe(200);
    expect(decodeJwt(login.json<{ accessToken: string }>().accessToken).roles).toEqual(['hr_manager']);
  });

  it('applies the same role again after an operator changed it (the assignment is recorded every time)', async () => {
    const { tenant, admin, user, employeeId, roles } = await employeeWithLogin();
    const put = () =>
      app.inject({ method: 'PUT', url: `/v1/employees/${employeeId}/role`, headers: admin, payload: { roleId: roles.analyst } });
    expect((await put()).statusCode).toBe(200);
    await waitFor(async () => (await roleOf(tenant, user.email)) === 'analyst');
    await withTenant(db.pool, tenant.tenantId, (tx) => setUserRole(tx, tenant.tenantId, user.email, 'employee'));
    expect((await put()).statusCode).toBe(200);
    await waitFor(async () => (await roleOf(tenant, user.email)) === 'analyst');
  });

  it('is for admins only (roles:assign): an hr_manager gets 403 and changes nothing', async () => {
    const { tenant, employeeId, roles, user } = await employeeWithLogin();
    for (const role of ['hr_manager', 'analyst', 'employee'] as const) {
      const headers = await authHeaders(auth, tenant, role);
      expectProblem(
        await app.inject({ method: 'PUT', url: `/v1/employees/${employeeId}/role`, headers, payload: { roleId: roles.admin } }),
        403,
      );
    }
    const history = await app.inject({
      method: 'GET',
      url: `/v1/employees/${employeeId}/history`,
      headers: await authHeaders(auth, tenant, 'admin'),
    });
    expect(history.json<{ data: { type: string }[] }>().data.map((e) => e.type)).toEqual(['EmployeeHired']);
    expect(await roleOf(tenant, user.email)).toBe('employee');
  });

  it("answers 422 for an unknown or another tenant's role, 404 for an unknown employee, 412 for a stale If-Match, 400 for a bad body", async () => {
    const { admin, employeeId, roles } = await employeeWithLogin();
    const other = await roleIds(await provisionTenant(db.pool));
    const put = (id: string, payload: unknown, extra: Record<string, string> = {}) =>
      app.inject({ method: 'PUT', url: `/v1/employees/${id}/role`, headers: { ...admin, ...extra }, payload: payload as object });
    expectProblem(await put(employeeId, { roleId: crypto.randomUUID() }), 422);
    expectProblem(await put(employeeId, { roleId: other.admin }), 422);
    expectProblem(await put('01JNGZ0000000000000000000A', { roleId: roles.analyst }), 404);
    expectProblem(await put(employeeId, { roleId: roles.analyst }, { 'if-match': '"7"' }), 412);
    // The precondition first (RFC 9110 §13.2.2): a stale If-Match is 412 whatever the role.
    expectProblem(await put(employeeId, { roleId: crypto.randomUUID() }, { 'if-match': '"7"' }), 412);
    expect((await put(employeeId, { roleId: roles.analyst }, { 'if-match': '"9", "0"' })).statusCode).toBe(200);
    expectProblem(await put(employeeId, { roleId: 'admin' }), 400);
    expectProblem(await put(employeeId, { roleId: roles.analyst, extra: 1 }), 400);
  });
});
