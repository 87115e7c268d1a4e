import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEmailHash } from '../../support/personalData.ts';
import { monotonicFactory } from 'ulid';
import { emailReservationStreamId } from '../../../services/employees/emailReservation.ts';
import { employeeStreamId, type Employee } from '../../../services/employees/contract.ts';
import { createEmployeesHarness, expectProblem, type EmployeesHarness } from '../../support/harness/employees.ts';

/** PATCH /v1/employees/{id}: regressions pinned through the API on real PostgreSQL. */
let h: EmployeesHarness;
beforeAll(async () => {
  h = await createEmployeesHarness();
});
afterAll(async () => {
  await h?.close();
});

const nextId = monotonicFactory();
const address = (label: string) => `${label}-${crypto.randomUUID()}@example.test`;

describe('when the employee does not exist (an email PATCH answered 409 or reserved for a made-up id)', () => {
  it('answers 404, not 409, for an address another employee holds, and leaves that reservation alone', async () => {
    const { tenant, headers } = await h.tenant();
    const taken = address('taken');
    const holder = await h.app.inject({
      method: 'POST',
      url: '/v1/employees',
      headers,
      payload: { email: taken, firstName: 'A', lastName: 'B' },
    });
    expect(holder.statusCode, holder.body).toBe(201);
    const before = await h.store.readStream(emailReservationStreamId(testEmailHash, tenant.tenantId, taken));

    const unknown = nextId();
    const response = await h.app.inject({ method: 'PATCH', url: `/v1/employees/${unknown}`, headers, payload: { email: taken } });
    expectProblem(response, 404);
    expect(await h.store.readStream(emailReservationStreamId(testEmailHash, tenant.tenantId, taken))).toEqual(before);
    expect(await h.store.readStream(employeeStreamId(tenant.tenantId, unknown))).toEqual([]);
  });

  it('answers 404 for a free address and appends nothing (no reservation for the made-up id)', async () => {
    const { tenant, headers } = await h.tenant();
    const free = address('free');
    const unknown = nextId();
    const response = await h.app.inject({
      method: 'PATCH',
      url: `/v1/employees/${unknown}`,
      headers,
      payload: { email: free, firstName: 'C' },
    });
    expectProblem(response, 404);
    expect(await h.store.readStream(emailReservationStreamId(testEmailHash, tenant.tenantId, free))).toEqual([]);
    expect(await h.store.readStream(employeeStreamId(tenant.tenantId, unknown))).toEqual([]);
  });
});

describe('when If-Match names the revision in another spelling (it was compared as a number)', () => {
  it('"00" does not match ETag "0": 412 and nothing changes; "0" itself matches', async () => {
    const { headers } = await h.tenant();
    const created = await h.app.inject({
      method: 'POST',
      url: '/v1/employees',
      headers,
      payload: { email: address('etag'), firstName: 'A', lastName: 'B' },
    });
    expect(created.statusCode, created.body).toBe(201);
    expect(created.headers.etag).toBe('"0"');
    const { id } = created.json<Employee>();

    for (const ifMatch of ['"00"', '"+0"', '"0.0"', 'W/"0", "00"']) {
      const patched = await h.app.inject({
        method: 'PATCH',
        url: `/v1/employees/${id}`,
        headers: { ...headers, 'if-match': ifMatch },
        payload: { firstName: 'Zed' },
      });
      expect(expectProblem(patched, 412).currentRevision, ifMatch).toBe(0);
      const status = await h.app.inject({
        method: 'POST',
        url: `/v1/employees/${id}/status`,
        headers: { ...headers, 'if-match': ifMatch },
        payload: { status: 'on_leave' },
      });
      expectProblem(status, 412);
    }
    const read = await h.app.inject({ method: 'GET', url: `/v1/employees/${id}`, headers });
    expect(read.headers.etag).toBe('"0"');
    expect(read.json<Employee>().firstName).toBe('A');

    const exact = await h.app.inject({
      method: 'PATCH',
      url: `/v1/employees/${id}`,
      headers: { ...headers, 'if-match': '"0"' },
      payload: { firstName: 'Zed' },
    });
    expect(exact.statusCode, exact.body).toBe(200);
    expect(exact.headers.etag).toBe('"1"');
  });
});
