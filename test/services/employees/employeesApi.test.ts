import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withTenant } from '../../../shared/db/pool.ts';
import { listRoles } from '../../../services/auth/roles.ts';
import { findUserByEmail } from '../../../services/auth/users.ts';
import { createEmployeesHarness, expectProblem, type EmployeesHarness } from '../../support/harness/employees.ts';
import { waitFor } from '../../support/waitFor.ts';

type Employee = { id: string; email: string; firstName: string; lastName: string; department: string | null; status: string; hiredAt: string };
type Page = { data: Employee[]; meta: { page: number; limit: number; total: number } };

let h: EmployeesHarness;
let tick = Date.parse('2025-03-01T10:00:00.000Z');
const clock = () => new Date((tick += 1_000));

beforeAll(async () => {
  h = await createEmployeesHarness({ clock, readWaitMs: 2_000 });
});
afterAll(async () => {
  await h?.close();
});

let counter = 0;
const uniqueEmail = (prefix = 'person') => `${prefix}-${Date.now().toString(36)}-${counter++}@example.test`;

async function hire(headers: Record<string, string>, body: Record<string, unknown> = {}) {
  return h.app.inject({
    method: 'POST',
    url: '/v1/employees',
    headers,
    payload: { email: uniqueEmail(), firstName: 'Ada', lastName: 'Lovelace', department: 'engineering', ...body },
  });
}

async function hired(headers: Record<string, string>, body: Record<string, unknown> = {}) {
  const response = await hire(headers, body);
  expect(response.statusCode, response.body).toBe(201);
  return { employee: response.json<Employee>(), position: String(response.headers['x-log-position']), etag: String(response.headers.etag) };
}

/** Reads after the projection caught up with `position` (read-your-writes). */
const read = (headers: Record<string, string>, url: string, position?: string) =>
  h.app.inject({ method: 'GET', url, headers: { ...headers, ...(position && { 'x-min-position': position }) } });

describe('POST /v1/employees', () => {
  describe('when the body is valid', () => {
    it('answers 201 with Location, ETag, log position and the employee built from the events', async () => {
      const { headers } = await h.tenant();
      const email = uniqueEmail('ada');
      const response = await hire(headers, { email });
      expect(response.statusCode).toBe(201);
      const body = response.json<Employee>();
      expect(body).toEqual({
        id: expect.stringMatching(/^[0-9A-HJKMNP-TV-Z]{26}$/),
        email,
        firstName: 'Ada',
        lastName: 'Lovelace',
        department: 'engineering',
        status: 'active',
        hiredAt: expect.stringMatching(/^2025-03-01T10:\d\d:\d\d\.000Z$/),
      });
      expect(response.headers.location).toBe(`/v1/employees/${body.id}`);
      expect(response.headers.etag).toBe('"0"');
      expect(response.headers['x-log-position']).toMatch(/^\d+-\d+$/);
    });

    it('keeps an imported hiredAt, normalised to UTC', async () => {
      const { headers } = await h.tenant();
      const { employee } = await hired(headers, { hiredAt: '2019-06-30T23:00:00+02:00' });
      expect(employee.hiredAt).toBe('2019-06-30T21:00:00.000Z');
    });

    it('records a missing department as null', async () => {
      const { headers } = await h.tenant();
      const { employee } = await hired(headers, { department: undefined });
      expect(employee.department).toBeNull();
    });

    it('assigns a known roleId to the person (users.role_id) and records it in the stream', async () => {
      const { headers, tenant } = await h.tenant('admin');
      const roles = await withTenant(h.db.pool, tenant.tenantId, (tx) => listRoles(tx, tenant.tenantId));
      const analyst = roles.find((r) => r.name === 'analyst');
      const email = uniqueEmail('analyst');
      const response = await hire(headers, { email, roleId: analyst?.id });
      expect(response.statusCode, response.body).toBe(201);
      expect(response.headers.etag).toBe('"1"');
      // Applied by the role reactor, shortly after the event.
      const user = await waitFor(async () => {
        const found = await withTenant(h.db.pool, tenant.tenantId, (tx) => findUserByEmail(tx, tenant.tenantId, email));
        return found?.role === 'analyst' && found;
      });
      expect(user.role).toBe('analyst');
    });
  });

  describe('when the email is taken in the tenant', () => {
    it('answers 409, whatever the case of the address', async () => {
      const { headers } = await h.tenant();
      const email = uniqueEmail('Grace');
      await hired(headers, { email });
      expectProblem(await hire(headers, { email: email.toUpperCase() }), 409);
    });

    it('does not stop another tenant from using it', async () => {
      const first = await h.tenant();
      const second = await h.tenant();
      const email = uniqueEmail('shared');
      await hired(first.headers, { email });
      await hired(second.headers, { email });
    });
  });

  describe('when an hr_manager sends a roleId', () => {
    it('answers 403 and changes nobody\'s role: only admins assign roles (regression: hr_manager could make itself admin)', async () => {
      const { headers, tenant } = await h.tenant('hr_manager');
      const roles = await withTenant(h.db.pool, tenant.tenantId, (tx) => listRoles(tx, tenant.tenantId));
      const admin = roles.find((r) => r.name === 'admin');
      const email = uniqueEmail('escalate');
      expectProblem(await hire(headers, { email, roleId: admin?.id }), 403);
      expect(await withTenant(h.db.pool, tenant.tenantId, (tx) => findUserByEmail(tx, tenant.tenantId, email))).toBeNull();
      await hired(headers, { email }); // nothing was reserved either
    });
  });

  describe('when the roleId names no role of the tenant', () => {
    it('answers 422 and creates nothing', async () => {
      const { headers } = await h.tenant('admin');
      const email = uniqueEmail('norole');
      expectProblem(await hire(headers, { email, roleId: '00000000-0000-4000-8000-000000000000' }), 422);
      await hired(headers, { email }); // the address was not left reserved
    });

    it("answers 422 for another tenant's role", async () => {
      const other = await h.tenant();
      const roles = await withTenant(h.db.pool, other.tenant.tenantId, (tx) => listRoles(tx, other.tenant.tenantId));
      const { headers } = await h.tenant('admin');
      expectProblem(await hire(headers, { roleId: roles[0]?.id }), 422);
    });
  });

  describe('when the body breaks the schema', () => {
    it.each([
      ['no email', { email: undefined }],
      ['a malformed email', { email: 'not-an-email' }],
      ['an empty first name', { firstName: '' }],
      ['a number as last name', { lastName: 42 }],
      ['a roleId that is not a uuid', { roleId: 'admin' }],
      ['a hiredAt without offset', { hiredAt: '2024-01-01T00:00:00' }],
      ['an unknown field', { salary: 1 }],
    ])('answers 400 with the errors for %s', async (_label, patch) => {
      const { headers } = await h.tenant();
      const problem = expectProblem(await hire(headers, patch), 400);
      expect(problem.errors).toEqual(expect.arrayContaining([expect.objectContaining({ path: expect.stringMatching(/^body/) })]));
    });

    it('answers 400 for a body that is not JSON', async () => {
      const { headers } = await h.tenant();
      const response = await h.app.inject({
        method: 'POST',
        url: '/v1/employees',
        headers: { ...headers, 'content-type': 'application/json' },
        payload: '{"email":',
      });
      expectProblem(response, 400);
    });

    it('answers 415 for a body that is not JSON at all', async () => {
      const { headers } = await h.tenant();
      const response = await h.app.inject({
        method: 'POST',
        url: '/v1/employees',
        headers: { ...headers, 'content-type': 'application/xml' },
        payload: '<employee/>',
      });
      expectProblem(response, 415);
    });
  });

  describe('when the caller may not write employees', () => {
    it('answers 403 for the employee role', async () => {
      const { as } = await h.tenant();
      expectProblem(await hire(await as('employee')), 403);
    });

    it('answers 401 without a token', async () => {
      const { tenant } = await h.tenant();
      const response = await hire({ 'x-tenant': tenant.slug });
      expectProblem(response, 401);
      expect(response.headers['www-authenticate']).toMatch(/^Bearer/);
    });
  });
});

describe('GET /v1/employees/{id}', () => {
  describe('when the employee exists', () => {
    it('answers 200 with the employee and its stream revision as ETag', async () => {
      const { headers } = await h.tenant();
      const { employee, position } = await hired(headers);
      const response = await read(headers, `/v1/employees/${employee.id}`, position);
      expect(response.statusCode).toBe(200);
      expect(response.json()).toEqual(employee);
      expect(response.headers.etag).toBe('"0"');
      expect(response.headers['x-consistency']).toBe('consistent');
    });

    it('is readable with the employee role', async () => {
      const { headers, as } = await h.tenant();
      const { employee, position } = await hired(headers);
      expect((await read(await as('employee'), `/v1/employees/${employee.id}`, position)).statusCode).toBe(200);
    });
  });

  describe('when it does not exist', () => {
    it('answers 404', async () => {
      const { headers } = await h.tenant();
      expectProblem(await read(headers, '/v1/employees/01JNGZ0000000000000000000A'), 404);
    });

    it("answers 404 for another tenant's employee", async () => {
      const first = await h.tenant();
      const { employee, position } = await hired(first.headers);
      const second = await h.tenant();
      expectProblem(await read(second.headers, `/v1/employees/${employee.id}`, position), 404);
    });
  });

  it('answers 400 for an id that is not a ULID', async () => {
    const { headers } = await h.tenant();
    expectProblem(await read(headers, '/v1/employees/not-an-id'), 400);
  });
});

describe('read-your-writes', () => {
  it('answers 400 for a malformed X-Min-Position', async () => {
    const { headers } = await h.tenant();
    expectProblem(await read(headers, '/v1/employees', 'yesterday'), 400);
    expectProblem(await read(headers, '/v1/employees?minPosition=abc'), 400);
  });

  it('accepts the position in the query too', async () => {
    const { headers } = await h.tenant();
    const { employee, position } = await hired(headers);
    const response = await read(headers, `/v1/employees?minPosition=${position}`);
    expect(response.headers['x-consistency']).toBe('consistent');
    expect(response.json<Page>().data.map((e) => e.id)).toEqual([employee.id]);
  });

  it('answers with what it has, flagged stale, when the projection does not get there in time', async () => {
    const { headers } = await h.tenant();
    const started = Date.now();
    const response = await read(headers, '/v1/employees', '99999999999-99999999999');
    expect(response.statusCode).toBe(200);
    expect(response.headers['x-consistency']).toBe('stale');
    expect(Date.now() - started).toBeLessThan(3_000);
  });
});

describe('GET /v1/employees', () => {
  /** A tenant with 5 employees over 4 days, two departments, statuses mixed. */
  async function seeded() {
    const t = await h.tenant();
    const specs = [
      { hiredAt: '2024-01-01T08:00:00Z', department: 'sales' },
      { hiredAt: '2024-01-02T00:00:00Z', department: 'engineering' },
      { hiredAt: '2024-01-02T23:59:59.999Z', department: 'engineering' },
      { hiredAt: '2024-01-03T12:00:00Z', department: 'sales' },
      { hiredAt: '2024-01-04T12:00:00Z', department: 'engineering' },
    ];
    const employees: Employee[] = [];
    for (const spec of specs) employees.push((await hired(t.headers, spec)).employee);
    const onLeave = await h.app.inject({
      method: 'POST',
      url: `/v1/employees/${employees[1]?.id}/status`,
      headers: t.headers,
      payload: { status: 'on_leave' },
    });
    const position = String(onLeave.headers['x-log-position']);
    const list = async (query: string) => {
      const response = await read(t.headers, `/v1/employees${query}`, position);
      expect(response.statusCode, response.body).toBe(200);
      return response.json<Page>();
    };
    return { ...t, employees, list };
  }

  it('lists newest hire first with exact total and the default page size', async () => {
    const { employees, list } = await seeded();
    const page = await list('');
    expect(page.meta).toEqual({ page: 1, limit: 20, total: 5 });
    expect(page.data.map((e) => e.id)).toEqual(employees.map((e) => e.id).reverse());
  });

  it('pages without gaps or repeats', async () => {
    const { employees, list } = await seeded();
    const pages = [await list('?limit=2&page=1'), await list('?limit=2&page=2'), await list('?limit=2&page=3')];
    expect(pages.map((p) => p.meta.total)).toEqual([5, 5, 5]);
    expect(pages.flatMap((p) => p.data.map((e) => e.id))).toEqual(employees.map((e) => e.id).reverse());
    expect((await list('?limit=2&page=4')).data).toEqual([]);
  });

  it('breaks ties in hiredAt by id, newest id first', async () => {
    const { headers } = await h.tenant();
    const same = '2023-05-05T05:05:05.000Z';
    const a = (await hired(headers, { hiredAt: same })).employee;
    const b = await hired(headers, { hiredAt: same });
    const page = (await read(headers, '/v1/employees', b.position)).json<Page>();
    expect(page.data.map((e) => e.id)).toEqual([b.employee.id, a.id]);
  });

  it('filters by department and status, with exact totals', async () => {
    const { employees, list } = await seeded();
    const engineering = await list('?department=engineering');
    expect(engineering.data.map((e) => e.id)).toEqual([employees[4], employees[2], employees[1]].map((e) => e?.id));
    expect(engineering.meta.total).toBe(3);
    const onLeave = await list('?status=on_leave');
    expect(onLeave.data.map((e) => e.id)).toEqual([employees[1]?.id]);
    expect(onLeave.meta.total).toBe(1);
    const both = await list('?status=active&department=engineering');
    expect(both.meta.total).toBe(2);
    expect((await list('?department=marketing')).meta.total).toBe(0);
  });

  it('filters by hire date, inclusive, as dates or date-times', async () => {
    const { employees, list } = await seeded();
    const ids = (p: Page) => p.data.map((e) => e.id);
    // A date as upper bound includes its whole day (up to 23:59:59.999).
    const day2 = await list('?hiredFrom=2024-01-02&hiredTo=2024-01-02');
    expect(ids(day2)).toEqual([employees[2]?.id, employees[1]?.id]);
    expect(day2.meta.total).toBe(2);
    const exact = await list('?hiredFrom=2024-01-01T08:00:00Z&hiredTo=2024-01-02T00:00:00Z');
    expect(ids(exact)).toEqual([employees[1]?.id, employees[0]?.id]);
    expect((await list('?hiredFrom=2024-01-03')).meta.total).toBe(2);
    expect((await list('?hiredTo=2024-01-01')).meta.total).toBe(1);
    expect((await list('?hiredFrom=2024-01-02&department=sales&status=active')).meta.total).toBe(1);
    // A date-time lower bound inside a date-only upper bound's day is a valid range, not "after" it.
    const lateOnDay2 = await list('?hiredFrom=2024-01-02T12:00:00Z&hiredTo=2024-01-02');
    expect(ids(lateOnDay2)).toEqual([employees[2]?.id]);
  });

  it('shows only the tenant’s own employees', async () => {
    const first = await seeded();
    const other = await h.tenant();
    const page = (await read(other.headers, '/v1/employees', undefined)).json<Page>();
    expect(page.meta.total).toBe(0);
    expect(page.data.filter((e) => first.employees.some((x) => x.id === e.id))).toEqual([]);
  });

  describe('when the query is invalid', () => {
    it.each([
      ['limit above 100', '?limit=101'],
      ['limit 0', '?limit=0'],
      ['page 0', '?page=0'],
      ['a page that is not a number', '?page=two'],
      ['an unknown status', '?status=retired'],
      ['a malformed date', '?hiredFrom=2024-13-01'],
      ['a date-time without offset', '?hiredTo=2024-01-01T10:00:00'],
      ['hiredFrom after hiredTo', '?hiredFrom=2024-02-01&hiredTo=2024-01-01'],
      ['hiredFrom after the whole day of a date hiredTo', '?hiredFrom=2024-01-02T00:00:00Z&hiredTo=2024-01-01'],
      ['an unknown parameter', '?sort=name'],
    ])('answers 400 for %s', async (_label, query) => {
      const { headers } = await h.tenant();
      expectProblem(await read(headers, `/v1/employees${query}`), 400);
    });
  });

  it('answers 403 to a role without employees:read', async () => {
    const { as } = await h.tenant();
    expectProblem(await read(await as(['no-such-role']), '/v1/employees'), 403);
  });
});

describe('PATCH /v1/employees/{id}', () => {
  const patch = (headers: Record<string, string>, id: string, payload: Record<string, unknown>, ifMatch?: string) =>
    h.app.inject({ method: 'PATCH', url: `/v1/employees/${id}`, headers: { ...headers, ...(ifMatch && { 'if-match': ifMatch }) }, payload });

  it('changes the named fields and answers from the events with the new ETag', async () => {
    const { headers } = await h.tenant();
    const { employee } = await hired(headers);
    const response = await patch(headers, employee.id, { firstName: 'Augusta', department: null });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toEqual({ ...employee, firstName: 'Augusta', department: null });
    expect(response.headers.etag).toBe('"1"');
    const after = await read(headers, `/v1/employees/${employee.id}`, String(response.headers['x-log-position']));
    expect(after.json()).toEqual({ ...employee, firstName: 'Augusta', department: null });
    expect(after.headers.etag).toBe('"1"');
  });

  it('answers 200 with the current ETag when nothing changes', async () => {
    const { headers } = await h.tenant();
    const { employee } = await hired(headers);
    const response = await patch(headers, employee.id, { firstName: 'Ada' });
    expect(response.statusCode).toBe(200);
    expect(response.headers.etag).toBe('"0"');
  });

  describe('with If-Match', () => {
    it('applies the change when the ETag is current', async () => {
      const { headers } = await h.tenant();
      const { employee, etag } = await hired(headers);
      expect((await patch(headers, employee.id, { lastName: 'King' }, etag)).statusCode).toBe(200);
    });

    it('answers 412 when the ETag is stale', async () => {
      const { headers } = await h.tenant();
      const { employee, etag } = await hired(headers);
      expect((await patch(headers, employee.id, { lastName: 'King' })).statusCode).toBe(200);
      expectProblem(await patch(headers, employee.id, { lastName: 'Byron' }, etag), 412);
    });

    it('answers 412 for a weak or malformed ETag', async () => {
      const { headers } = await h.tenant();
      const { employee } = await hired(headers);
      expectProblem(await patch(headers, employee.id, { lastName: 'King' }, 'W/"0"'), 412);
    });

    it('applies the change when any tag of a list is current (RFC 9110), and answers 412 when none is', async () => {
      const { headers } = await h.tenant();
      const { employee } = await hired(headers);
      expect((await patch(headers, employee.id, { lastName: 'King' }, '"7", "0"')).statusCode).toBe(200);
      expectProblem(await patch(headers, employee.id, { lastName: 'Byron' }, '"0", W/"1", "a,1"'), 412);
      const both = await patch(headers, employee.id, { lastName: 'Byron' }, 'W/"0" , "1"');
      expect(both.statusCode, both.body).toBe(200);
      expect(both.headers.etag).toBe('"2"');
    });

    it('answers 412, not 409, for a stale ETag with an address another employee has', async () => {
      const { headers } = await h.tenant();
      const taken = uniqueEmail('taken-stale');
      await hired(headers, { email: taken });
      const { employee, etag } = await hired(headers);
      expect((await patch(headers, employee.id, { lastName: 'King' })).statusCode).toBe(200);
      expectProblem(await patch(headers, employee.id, { email: taken }, etag), 412);
      expectProblem(await patch(headers, employee.id, { email: taken }, '"1"'), 409);
    });
  });

  describe('when the email changes', () => {
    it('frees the old address and claims the new one', async () => {
      const { headers } = await h.tenant();
      const oldEmail = uniqueEmail('old');
      const newEmail = uniqueEmail('new');
      const { employee } = await hired(headers, { email: oldEmail });
      const response = await patch(headers, employee.id, { email: newEmail });
      expect(response.statusCode, response.body).toBe(200);
      expect(response.json<Employee>().email).toBe(newEmail);
      await hired(headers, { email: oldEmail });
      expectProblem(await hire(headers, { email: newEmail }), 409);
    });

    it('answers 409 when another employee has the address', async () => {
      const { headers } = await h.tenant();
      const taken = uniqueEmail('taken');
      await hired(headers, { email: taken });
      const { employee } = await hired(headers);
      expectProblem(await patch(headers, employee.id, { email: taken.toUpperCase() }), 409);
    });

    it('lets an employee change only the case of their own address', async () => {
      const { headers } = await h.tenant();
      const email = uniqueEmail('case');
      const { employee } = await hired(headers, { email });
      expect((await patch(headers, employee.id, { email: email.toUpperCase() })).statusCode).toBe(200);
    });

    it('releases the new address again when the If-Match is stale', async () => {
      const { headers } = await h.tenant();
      const wanted = uniqueEmail('wanted');
      const { employee } = await hired(headers);
      expectProblem(await patch(headers, employee.id, { email: wanted }, '"7"'), 412);
      await hired(headers, { email: wanted });
    });
  });

  it('answers 404 for an unknown employee', async () => {
    const { headers } = await h.tenant();
    expectProblem(await patch(headers, '01JNGZ0000000000000000000A', { firstName: 'X' }), 404);
  });

  it.each([
    ['an empty body', {}],
    ['an unknown field', { status: 'inactive' }],
    ['a malformed email', { email: 'nope' }],
    ['an empty last name', { lastName: ' ' }],
  ])('answers 400 for %s', async (_label, payload) => {
    const { headers } = await h.tenant();
    const { employee } = await hired(headers);
    expectProblem(await patch(headers, employee.id, payload), 400);
  });

  it('answers 403 to the analyst role', async () => {
    const { headers, as } = await h.tenant();
    const { employee } = await hired(headers);
    expectProblem(await patch(await as('analyst'), employee.id, { firstName: 'X' }), 403);
  });
});

describe('POST /v1/employees/{id}/status', () => {
  const setStatus = (headers: Record<string, string>, id: string, payload: Record<string, unknown>, ifMatch?: string) =>
    h.app.inject({ method: 'POST', url: `/v1/employees/${id}/status`, headers: { ...headers, ...(ifMatch && { 'if-match': ifMatch }) }, payload });

  it('walks every allowed transition and answers with the updated employee', async () => {
    const { headers } = await h.tenant();
    const { employee } = await hired(headers);
    const walk = ['on_leave', 'active', 'inactive', 'active', 'on_leave', 'inactive'];
    for (const [i, status] of walk.entries()) {
      const response = await setStatus(headers, employee.id, { status, reason: `step ${i}` });
      expect(response.statusCode, response.body).toBe(200);
      expect(response.json()).toEqual({ ...employee, status });
      expect(response.headers.etag).toBe(`"${i + 1}"`);
    }
  });

  it.each([
    ['active', 'active', []],
    ['on_leave', 'on_leave', ['on_leave']],
    ['inactive', 'inactive', ['inactive']],
    ['inactive', 'on_leave', ['inactive']],
  ])('answers 409 from %s to %s', async (_from, to, before) => {
    const { headers } = await h.tenant();
    const { employee } = await hired(headers);
    for (const status of before) expect((await setStatus(headers, employee.id, { status })).statusCode).toBe(200);
    expectProblem(await setStatus(headers, employee.id, { status: to }), 409);
  });

  it('answers 412 for a stale If-Match', async () => {
    const { headers } = await h.tenant();
    const { employee } = await hired(headers);
    expectProblem(await setStatus(headers, employee.id, { status: 'on_leave' }, '"3"'), 412);
  });

  it('answers 404 for an unknown employee', async () => {
    const { headers } = await h.tenant();
    expectProblem(await setStatus(headers, '01JNGZ0000000000000000000A', { status: 'inactive' }), 404);
  });

  it.each([
    ['no status', {}],
    ['an unknown status', { status: 'fired' }],
    ['a reason that is not text', { status: 'inactive', reason: 3 }],
  ])('answers 400 for %s', async (_label, payload) => {
    const { headers } = await h.tenant();
    const { employee } = await hired(headers);
    expectProblem(await setStatus(headers, employee.id, payload), 400);
  });
});

describe('GET /v1/employees/{id}/history', () => {
  it('lists the events with type, data, occurredAt and actor, oldest first', async () => {
    const { tenant } = await h.tenant();
    const userId = crypto.randomUUID();
    const { authHeaders } = await import('../../support/auth.ts');
    const headers = await authHeaders(h.auth, tenant, 'hr_manager', userId);
    const { employee } = await hired(headers);
    await h.app.inject({ method: 'POST', url: `/v1/employees/${employee.id}/status`, headers, payload: { status: 'on_leave', reason: 'parental leave' } });
    const response = await read(headers, `/v1/employees/${employee.id}/history`);
    expect(response.statusCode).toBe(200);
    const { data } = response.json<{ data: Array<{ type: string; data: Record<string, unknown>; occurredAt: string; actor: string }> }>();
    expect(data.map((e) => e.type)).toEqual(['EmployeeHired', 'EmployeeStatusChanged']);
    expect(data[1]?.data).toMatchObject({ from: 'active', to: 'on_leave', reason: 'parental leave' });
    expect(data.every((e) => e.actor === userId)).toBe(true);
    expect(data[0]?.occurredAt).toBe(employee.hiredAt);
  });

  it('answers 404 for an unknown employee', async () => {
    const { headers } = await h.tenant();
    expectProblem(await read(headers, '/v1/employees/01JNGZ0000000000000000000A/history'), 404);
  });
});

describe('GET /v1/openapi.json', () => {
  it('describes every employees endpoint from the same zod schemas', async () => {
    const response = await h.app.inject({ method: 'GET', url: '/v1/openapi.json' });
    expect(response.statusCode).toBe(200);
    const paths = response.json<{ paths: Record<string, Record<string, unknown>> }>().paths;
    expect(Object.keys(paths['/v1/employees'] ?? {}).sort()).toEqual(['get', 'post']);
    expect(Object.keys(paths['/v1/employees/{id}'] ?? {}).sort()).toEqual(['get', 'patch']);
    expect(Object.keys(paths['/v1/employees/{id}/status'] ?? {})).toEqual(['post']);
    expect(Object.keys(paths['/v1/employees/{id}/history'] ?? {})).toEqual(['get']);
  });
});
