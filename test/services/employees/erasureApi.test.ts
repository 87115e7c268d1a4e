import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql, withTenant } from '../../../shared/db/pool.ts';
import { createUser, findUserByEmail } from '../../../services/auth/users.ts';
import { listRoles } from '../../../services/auth/roles.ts';
import { useEmployeesApi, type Page } from '../../support/harness/employeesApi.ts';
import { expectProblem } from '../../support/harness/employees.ts';
import { waitFor } from '../../support/waitFor.ts';

/** POST /v1/employees/{id}/erasure through the API: what the erased employee answers afterwards, and who may erase. */
const api = useEmployeesApi();

async function erasedEmployee() {
  const t = await api.h.tenant('admin');
  const email = api.uniqueEmail('erase');
  const { employee } = await api.hired(t.headers, { email, department: 'research' });
  const erased = await api.h.app.inject({ method: 'POST', url: `/v1/employees/${employee.id}/erasure`, headers: t.headers });
  expect(erased.statusCode, erased.body).toBe(200);
  return { t, email, employee, erased };
}

describe('when an admin erases an employee', () => {
  it('answers the id and erasedAt, and the same erasedAt when asked again', async () => {
    const { t, employee, erased } = await erasedEmployee();
    const body = erased.json<{ id: string; erasedAt: string }>();
    expect(body).toEqual({ id: employee.id, erasedAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT.*Z$/) });
    expect(erased.headers['x-log-position']).toMatch(/^\d+-\d+$/);
    const again = await api.h.app.inject({ method: 'POST', url: `/v1/employees/${employee.id}/erasure`, headers: t.headers });
    expect(again.statusCode).toBe(200);
    expect(again.json()).toEqual(body);
  });

  it('answers 410 /problems/erased for the employee and its history, and refuses commands with 410', async () => {
    const { t, employee } = await erasedEmployee();
    for (const url of [`/v1/employees/${employee.id}`, `/v1/employees/${employee.id}/history`]) {
      const problem = expectProblem(await api.h.app.inject({ method: 'GET', url, headers: t.headers }), 410);
      expect(problem.type).toBe('/problems/erased');
      expect(JSON.stringify(problem)).not.toContain('Lovelace');
    }
    const patched = await api.h.app.inject({
      method: 'PATCH',
      url: `/v1/employees/${employee.id}`,
      headers: t.headers,
      payload: { firstName: 'Again' },
    });
    expect(expectProblem(patched, 410).type).toBe('/problems/erased');
    const status = await api.h.app.inject({
      method: 'POST',
      url: `/v1/employees/${employee.id}/status`,
      headers: t.headers,
      payload: { status: 'inactive' },
    });
    expect(expectProblem(status, 410).type).toBe('/problems/erased');
    // Erased comes first: not a 412 for a tag made stale by the erasure, nor a 422 for an unknown role.
    const stale = await api.h.app.inject({
      method: 'PATCH',
      url: `/v1/employees/${employee.id}`,
      headers: { ...t.headers, 'if-match': '"0"' },
      payload: { firstName: 'Again' },
    });
    expect(expectProblem(stale, 410).type).toBe('/problems/erased');
    const role = await api.h.app.inject({
      method: 'PUT',
      url: `/v1/employees/${employee.id}/role`,
      headers: t.headers,
      payload: { roleId: '00000000-0000-4000-8000-000000000000' },
    });
    expect(expectProblem(role, 410).type).toBe('/problems/erased');
  });

  it('leaves the employee out of every list, its total included, and frees the address', async () => {
    const { t, email, erased } = await erasedEmployee();
    const position = String(erased.headers['x-log-position']);
    const list = (await api.read(t.headers, '/v1/employees', position)).json<Page>();
    expect(list.data).toEqual([]);
    expect(list.meta.total).toBe(0);
    const byDepartment = (await api.read(t.headers, '/v1/employees?department=research&hiredFrom=2000-01-01', position)).json<Page>();
    expect(byDepartment.meta.total).toBe(0);
    const rehired = await api.hire(t.headers, { email });
    expect(rehired.statusCode, rehired.body).toBe(201);
  });
});

describe('when the erased person had a login made for them (a hire with roleId)', () => {
  it('takes its address away and disables it', async () => {
    const t = await api.h.tenant('admin');
    const roles = await withTenant(api.h.db.pool, t.tenant.tenantId, (tx) => listRoles(tx, t.tenant.tenantId));
    const analyst = roles.find((r) => r.name === 'analyst')?.id;
    const email = api.uniqueEmail('login');
    const { employee } = await api.hired(t.headers, { email, roleId: analyst });
    const user = await waitFor(() => withTenant(api.h.db.pool, t.tenant.tenantId, (tx) => findUserByEmail(tx, t.tenant.tenantId, email)));
    const erased = await api.h.app.inject({ method: 'POST', url: `/v1/employees/${employee.id}/erasure`, headers: t.headers });
    expect(erased.statusCode).toBe(200);
    const row = await withTenant(api.h.db.pool, t.tenant.tenantId, (tx) =>
      tx.one(sql.type(z.object({ email: z.string(), email_key: z.string(), disabled: z.boolean() }))`
        select email, email_key, disabled_at is not null as disabled from users where id = ${user.id}
      `),
    );
    expect(row).toEqual({ email: `erased-${user.id}@erased.invalid`, email_key: `erased-${user.id}@erased.invalid`, disabled: true });
    // And the role reactor forgot the address it kept for the employee.
    await waitFor(async () => {
      const n = await api.h.db.pool.oneFirst(sql.type(z.object({ n: z.number() }))`
        select count(*)::int as n from role_reactor_emails where employee_id = ${employee.id}
      `);
      return n === 0;
    });
  });
});

describe('when the erased person has a login at their address that no hire made (ops users create)', () => {
  it('takes its address away too, so a later hire at the freed address gets a login of its own', async () => {
    const t = await api.h.tenant('admin');
    const email = api.uniqueEmail('own-login');
    const own = await withTenant(api.h.db.pool, t.tenant.tenantId, (tx) =>
      createUser(tx, { tenantId: t.tenant.tenantId, email, password: 'a password of theirs', role: 'employee' }),
    );
    const { employee } = await api.hired(t.headers, { email });
    const erased = await api.h.app.inject({ method: 'POST', url: `/v1/employees/${employee.id}/erasure`, headers: t.headers });
    expect(erased.statusCode).toBe(200);
    const row = await withTenant(api.h.db.pool, t.tenant.tenantId, (tx) =>
      tx.one(sql.type(z.object({ email: z.string(), disabled: z.boolean() }))`
        select email, disabled_at is not null as disabled from users where id = ${own.id}
      `),
    );
    expect(row).toEqual({ email: `erased-${own.id}@erased.invalid`, disabled: true });

    // The address is free: a new person hired at it with a role gets a new login, not the old one.
    const roles = await withTenant(api.h.db.pool, t.tenant.tenantId, (tx) => listRoles(tx, t.tenant.tenantId));
    await api.hired(t.headers, { email, roleId: roles.find((r) => r.name === 'analyst')?.id });
    const next = await waitFor(() => withTenant(api.h.db.pool, t.tenant.tenantId, (tx) => findUserByEmail(tx, t.tenant.tenantId, email)));
    expect(next.id).not.toBe(own.id);
  });
});

describe('when the erased person has a login at an address they held before their email changed', () => {
  const loginAt = async (tenantId: string, email: string) =>
    withTenant(api.h.db.pool, tenantId, (tx) => createUser(tx, { tenantId, email, password: 'a password of theirs', role: 'employee' }));
  const rowOf = (tenantId: string, id: string) =>
    withTenant(api.h.db.pool, tenantId, (tx) =>
      tx.one(sql.type(z.object({ email: z.string(), disabled: z.boolean() }))`
        select email, disabled_at is not null as disabled from users where id = ${id}
      `),
    );
  const moved = async (headers: Record<string, string>, id: string, email: string) => {
    const response = await api.h.app.inject({ method: 'PATCH', url: `/v1/employees/${id}`, headers, payload: { email } });
    expect(response.statusCode, response.body).toBe(200);
  };

  it('takes the address away from that login too and disables it', async () => {
    const t = await api.h.tenant('admin');
    const former = api.uniqueEmail('former');
    const { employee } = await api.hired(t.headers, { email: former });
    const own = await loginAt(t.tenant.tenantId, former);
    await moved(t.headers, employee.id, api.uniqueEmail('current'));

    const erased = await api.h.app.inject({ method: 'POST', url: `/v1/employees/${employee.id}/erasure`, headers: t.headers });
    expect(erased.statusCode).toBe(200);

    expect(await rowOf(t.tenant.tenantId, own.id)).toEqual({ email: `erased-${own.id}@erased.invalid`, disabled: true });
  });

  it('leaves the login at a former address another employee holds now', async () => {
    const t = await api.h.tenant('admin');
    const former = api.uniqueEmail('taken-over');
    const { employee } = await api.hired(t.headers, { email: former });
    await moved(t.headers, employee.id, api.uniqueEmail('current'));
    await api.hired(t.headers, { email: former });
    const theirs = await loginAt(t.tenant.tenantId, former);

    const erased = await api.h.app.inject({ method: 'POST', url: `/v1/employees/${employee.id}/erasure`, headers: t.headers });
    expect(erased.statusCode).toBe(200);

    expect(await rowOf(t.tenant.tenantId, theirs.id)).toEqual({ email: former, disabled: false });
  });

  it('leaves the login at a former address another employee took after them, though they moved on too', async () => {
    const t = await api.h.tenant('admin');
    const former = api.uniqueEmail('passed-on');
    const { employee } = await api.hired(t.headers, { email: former });
    await moved(t.headers, employee.id, api.uniqueEmail('current'));
    const next = await api.hired(t.headers, { email: former });
    const theirs = await loginAt(t.tenant.tenantId, former);
    // The next employee's login stays at the address they no longer hold: nobody holds it now.
    await moved(t.headers, next.employee.id, api.uniqueEmail('later'));

    const erased = await api.h.app.inject({ method: 'POST', url: `/v1/employees/${employee.id}/erasure`, headers: t.headers });
    expect(erased.statusCode).toBe(200);

    expect(await rowOf(t.tenant.tenantId, theirs.id)).toEqual({ email: former, disabled: false });
  });
});

describe('who may erase', () => {
  it('is an admin only: an hr_manager gets 403 and nothing is erased; an unknown id is 404', async () => {
    const t = await api.h.tenant('admin');
    const { employee } = await api.hired(t.headers);
    const hr = await t.as('hr_manager');
    expectProblem(await api.h.app.inject({ method: 'POST', url: `/v1/employees/${employee.id}/erasure`, headers: hr }), 403);
    expect((await api.h.app.inject({ method: 'GET', url: `/v1/employees/${employee.id}`, headers: t.headers })).statusCode).toBe(200);
    expectProblem(
      await api.h.app.inject({ method: 'POST', url: '/v1/employees/01JNGZ0000000000000000000Z/erasure', headers: t.headers }),
      404,
    );
  });
});
