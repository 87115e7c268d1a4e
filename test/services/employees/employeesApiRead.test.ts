import { describe, expect, it } from 'vitest';
import { expectProblem } from '../../support/harness/employees.ts';
import { useEmployeesApi, type Employee, type Page } from '../../support/harness/employeesApi.ts';

/** Reading employees (one, a page, a history) and read-your-writes, through the gateway on real PostgreSQL. */
const api = useEmployeesApi();
const { hired, read } = api;

describe('GET /v1/employees/{id}', () => {
  describe('when the employee exists', () => {
    it('answers 200 with the employee and its stream revision as ETag', async () => {
      const { headers } = await api.h.tenant();
      const { employee, position } = await hired(headers);
      const response = await read(headers, `/v1/employees/${employee.id}`, position);
      expect(response.statusCode).toBe(200);
      expect(response.json()).toEqual(employee);
      expect(response.headers.etag).toBe('"0"');
      expect(response.headers['x-consistency']).toBe('consistent');
    });

    it('is readable with the employee role', async () => {
      const { headers, as } = await api.h.tenant();
      const { employee, position } = await hired(headers);
      expect((await read(await as('employee'), `/v1/employees/${employee.id}`, position)).statusCode).toBe(200);
    });
  });

  describe('when it does not exist', () => {
    it('answers 404', async () => {
      const { headers } = await api.h.tenant();
      expectProblem(await read(headers, '/v1/employees/01JNGZ0000000000000000000A'), 404);
    });

    it("answers 404 for another tenant's employee", async () => {
      const first = await api.h.tenant();
      const { employee, position } = await hired(first.headers);
      const second = await api.h.tenant();
      expectProblem(await read(second.headers, `/v1/employees/${employee.id}`, position), 404);
    });
  });

  it('answers 400 for an id that is not a ULID', async () => {
    const { headers } = await api.h.tenant();
    expectProblem(await read(headers, '/v1/employees/not-an-id'), 400);
  });
});

describe('read-your-writes', () => {
  it('answers 400 for a malformed X-Min-Position', async () => {
    const { headers } = await api.h.tenant();
    expectProblem(await read(headers, '/v1/employees', 'yesterday'), 400);
    expectProblem(await read(headers, '/v1/employees?minPosition=abc'), 400);
  });

  it('accepts the position in the query too', async () => {
    const { headers } = await api.h.tenant();
    const { employee, position } = await hired(headers);
    const response = await read(headers, `/v1/employees?minPosition=${position}`);
    expect(response.headers['x-consistency']).toBe('consistent');
    expect(response.json<Page>().data.map((e) => e.id)).toEqual([employee.id]);
  });

  it('answers with what it has, flagged stale, when the projection does not get there in time', async () => {
    const { headers } = await api.h.tenant();
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
    const t = await api.h.tenant();
    const specs = [
      { hiredAt: '2024-01-01T08:00:00Z', department: 'sales' },
      { hiredAt: '2024-01-02T00:00:00Z', department: 'engineering' },
      { hiredAt: '2024-01-02T23:59:59.999Z', department: 'engineering' },
      { hiredAt: '2024-01-03T12:00:00Z', department: 'sales' },
      { hiredAt: '2024-01-04T12:00:00Z', department: 'engineering' },
    ];
    const employees: Employee[] = [];
    for (const spec of specs) employees.push((await hired(t.headers, spec)).employee);
    const onLeave = await api.h.app.inject({
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
    const { headers } = await api.h.tenant();
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
    const other = await api.h.tenant();
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
      const { headers } = await api.h.tenant();
      expectProblem(await read(headers, `/v1/employees${query}`), 400);
    });
  });

  it('answers 403 to a role without employees:read', async () => {
    const { as } = await api.h.tenant();
    expectProblem(await read(await as(['no-such-role']), '/v1/employees'), 403);
  });
});

describe('GET /v1/employees/{id}/history', () => {
  it('lists the events with type, data, occurredAt and actor, oldest first', async () => {
    const { tenant } = await api.h.tenant();
    const userId = crypto.randomUUID();
    const { authHeaders } = await import('../../support/auth.ts');
    const headers = await authHeaders(api.h.auth, tenant, 'hr_manager', userId);
    const { employee } = await hired(headers);
    await api.h.app.inject({
      method: 'POST',
      url: `/v1/employees/${employee.id}/status`,
      headers,
      payload: { status: 'on_leave', reason: 'parental leave' },
    });
    const response = await read(headers, `/v1/employees/${employee.id}/history`);
    expect(response.statusCode).toBe(200);
    const { data } = response.json<{ data: Array<{ type: string; data: Record<string, unknown>; occurredAt: string; actor: string }> }>();
    expect(data.map((e) => e.type)).toEqual(['EmployeeHired', 'EmployeeStatusChanged']);
    expect(data[1]?.data).toMatchObject({ from: 'active', to: 'on_leave', reason: 'parental leave' });
    expect(data.every((e) => e.actor === userId)).toBe(true);
    expect(data[0]?.occurredAt).toBe(employee.hiredAt);
  });

  it('answers 404 for an unknown employee', async () => {
    const { headers } = await api.h.tenant();
    expectProblem(await read(headers, '/v1/employees/01JNGZ0000000000000000000A/history'), 404);
  });
});

describe('GET /v1/openapi.json', () => {
  it('describes every employees endpoint from the same zod schemas', async () => {
    const response = await api.h.app.inject({ method: 'GET', url: '/v1/openapi.json' });
    expect(response.statusCode).toBe(200);
    const paths = response.json<{ paths: Record<string, Record<string, unknown>> }>().paths;
    expect(Object.keys(paths['/v1/employees'] ?? {}).sort()).toEqual(['get', 'post']);
    expect(Object.keys(paths['/v1/employees/{id}'] ?? {}).sort()).toEqual(['get', 'patch']);
    expect(Object.keys(paths['/v1/employees/{id}/status'] ?? {})).toEqual(['post']);
    expect(Object.keys(paths['/v1/employees/{id}/history'] ?? {})).toEqual(['get']);
  });
});
