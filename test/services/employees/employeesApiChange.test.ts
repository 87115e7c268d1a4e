import { describe, expect, it } from 'vitest';
import { expectProblem } from '../../support/harness/employees.ts';
import { useEmployeesApi, type Employee } from '../../support/harness/employeesApi.ts';

/** Changing an employee (PATCH, status transitions) through the gateway, on real PostgreSQL. */
const api = useEmployeesApi();
const { uniqueEmail, hire, hired, read } = api;

describe('PATCH /v1/employees/{id}', () => {
  const patch = (headers: Record<string, string>, id: string, payload: Record<string, unknown>, ifMatch?: string) =>
    api.h.app.inject({
      method: 'PATCH',
      url: `/v1/employees/${id}`,
      headers: { ...headers, ...(ifMatch && { 'if-match': ifMatch }) },
      payload,
    });

  it('changes the named fields and answers from the events with the new ETag', async () => {
    const { headers } = await api.h.tenant();
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
    const { headers } = await api.h.tenant();
    const { employee } = await hired(headers);
    const response = await patch(headers, employee.id, { firstName: 'Ada' });
    expect(response.statusCode).toBe(200);
    expect(response.headers.etag).toBe('"0"');
  });

  describe('with If-Match', () => {
    it('applies the change when the ETag is current', async () => {
      const { headers } = await api.h.tenant();
      const { employee, etag } = await hired(headers);
      expect((await patch(headers, employee.id, { lastName: 'King' }, etag)).statusCode).toBe(200);
    });

    it('answers 412 when the ETag is stale', async () => {
      const { headers } = await api.h.tenant();
      const { employee, etag } = await hired(headers);
      expect((await patch(headers, employee.id, { lastName: 'King' })).statusCode).toBe(200);
      expectProblem(await patch(headers, employee.id, { lastName: 'Byron' }, etag), 412);
    });

    it('answers 412 for a weak or malformed ETag', async () => {
      const { headers } = await api.h.tenant();
      const { employee } = await hired(headers);
      expectProblem(await patch(headers, employee.id, { lastName: 'King' }, 'W/"0"'), 412);
    });

    it('applies the change when any tag of a list is current (RFC 9110), and answers 412 when none is', async () => {
      const { headers } = await api.h.tenant();
      const { employee } = await hired(headers);
      expect((await patch(headers, employee.id, { lastName: 'King' }, '"7", "0"')).statusCode).toBe(200);
      expectProblem(await patch(headers, employee.id, { lastName: 'Byron' }, '"0", W/"1", "a,1"'), 412);
      const both = await patch(headers, employee.id, { lastName: 'Byron' }, 'W/"0" , "1"');
      expect(both.statusCode, both.body).toBe(200);
      expect(both.headers.etag).toBe('"2"');
    });

    it('answers 412, not 409, for a stale ETag with an address another employee has', async () => {
      const { headers } = await api.h.tenant();
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
      const { headers } = await api.h.tenant();
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
      const { headers } = await api.h.tenant();
      const taken = uniqueEmail('taken');
      await hired(headers, { email: taken });
      const { employee } = await hired(headers);
      expectProblem(await patch(headers, employee.id, { email: taken.toUpperCase() }), 409);
    });

    it('lets an employee change only the case of their own address', async () => {
      const { headers } = await api.h.tenant();
      const email = uniqueEmail('case');
      const { employee } = await hired(headers, { email });
      expect((await patch(headers, employee.id, { email: email.toUpperCase() })).statusCode).toBe(200);
    });

    it('releases the new address again when the If-Match is stale', async () => {
      const { headers } = await api.h.tenant();
      const wanted = uniqueEmail('wanted');
      const { employee } = await hired(headers);
      expectProblem(await patch(headers, employee.id, { email: wanted }, '"7"'), 412);
      await hired(headers, { email: wanted });
    });
  });

  it('answers 404 for an unknown employee', async () => {
    const { headers } = await api.h.tenant();
    expectProblem(await patch(headers, '01JNGZ0000000000000000000A', { firstName: 'X' }), 404);
  });

  it.each([
    ['an empty body', {}],
    ['an unknown field', { status: 'inactive' }],
    ['a malformed email', { email: 'nope' }],
    ['an empty last name', { lastName: ' ' }],
  ])('answers 400 for %s', async (_label, payload) => {
    const { headers } = await api.h.tenant();
    const { employee } = await hired(headers);
    expectProblem(await patch(headers, employee.id, payload), 400);
  });

  it('answers 403 to the analyst role', async () => {
    const { headers, as } = await api.h.tenant();
    const { employee } = await hired(headers);
    expectProblem(await patch(await as('analyst'), employee.id, { firstName: 'X' }), 403);
  });
});

describe('POST /v1/employees/{id}/status', () => {
  const setStatus = (headers: Record<string, string>, id: string, payload: Record<string, unknown>, ifMatch?: string) =>
    api.h.app.inject({
      method: 'POST',
      url: `/v1/employees/${id}/status`,
      headers: { ...headers, ...(ifMatch && { 'if-match': ifMatch }) },
      payload,
    });

  it('walks every allowed transition and answers with the updated employee', async () => {
    const { headers } = await api.h.tenant();
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
    const { headers } = await api.h.tenant();
    const { employee } = await hired(headers);
    for (const status of before) expect((await setStatus(headers, employee.id, { status })).statusCode).toBe(200);
    expectProblem(await setStatus(headers, employee.id, { status: to }), 409);
  });

  it('answers 412 for a stale If-Match', async () => {
    const { headers } = await api.h.tenant();
    const { employee } = await hired(headers);
    expectProblem(await setStatus(headers, employee.id, { status: 'on_leave' }, '"3"'), 412);
  });

  it('answers 404 for an unknown employee', async () => {
    const { headers } = await api.h.tenant();
    expectProblem(await setStatus(headers, '01JNGZ0000000000000000000A', { status: 'inactive' }), 404);
  });

  it.each([
    ['no status', {}],
    ['an unknown status', { status: 'fired' }],
    ['a reason that is not text', { status: 'inactive', reason: 3 }],
  ])('answers 400 for %s', async (_label, payload) => {
    const { headers } = await api.h.tenant();
    const { employee } = await hired(headers);
    expectProblem(await setStatus(headers, employee.id, payload), 400);
  });
});
