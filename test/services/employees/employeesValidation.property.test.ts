import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createEmployeesHarness, expectProblem, type EmployeesHarness } from '../../support/harness/employees.ts';

/**
 * Properties of the input boundary: whatever a client sends that breaks the documented schema,
 * the answer is a 400 problem+json — never a 5xx, never a created employee.
 */
let h: EmployeesHarness;
let headers: Record<string, string>;
let employeeId: string;

beforeAll(async () => {
  h = await createEmployeesHarness();
  ({ headers } = await h.tenant());
  const created = await h.app.inject({
    method: 'POST',
    url: '/v1/employees',
    headers,
    payload: { email: 'target@example.test', firstName: 'T', lastName: 'T' },
  });
  employeeId = created.json<{ id: string }>().id;
});
afterAll(async () => {
  await h?.close();
});

const valid = { email: 'someone@example.test', firstName: 'Some', lastName: 'One', department: 'sales' };

/** A value of the wrong type (or shape) for any string field. */
const notAString = fc.oneof(
  fc.integer(),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.string(), { maxLength: 3 }),
  fc.object({ maxDepth: 1 }),
);
const badEmail = fc.oneof(
  fc.string({ maxLength: 40 }).filter((s) => !/^[^@\s]+@[^@\s]+\.[^@\s]+$/.test(s)),
  fc.constant('a@'),
  fc.constant('@b.c'),
  fc.string({ minLength: 330, maxLength: 400 }).map((s) => `${s}@example.test`),
);
const blank = fc.constantFrom('', ' ', '\t', '   ');
const tooLong = fc.string({ minLength: 101, maxLength: 200 }).filter((s) => s.trim().length > 100);
const unknownKey = fc
  .string({ minLength: 1, maxLength: 12 })
  .filter((k) => !['email', 'firstName', 'lastName', 'department', 'roleId', 'hiredAt', '__proto__', 'constructor'].includes(k));

/** A valid body with exactly one thing broken. */
const invalidCreateBody = fc.oneof(
  fc
    .record({ field: fc.constantFrom('email', 'firstName', 'lastName', 'department', 'roleId', 'hiredAt'), value: notAString })
    .map(({ field, value }) => ({ ...valid, [field]: value })),
  badEmail.map((email) => ({ ...valid, email })),
  fc
    .record({ field: fc.constantFrom('firstName', 'lastName', 'department'), value: fc.oneof(blank, tooLong) })
    .map(({ field, value }) => ({ ...valid, [field]: value })),
  fc.constantFrom('email', 'firstName', 'lastName').map((field) => Object.fromEntries(Object.entries(valid).filter(([k]) => k !== field))),
  fc
    .string({ maxLength: 20 })
    .filter((s) => !/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(s))
    .map((roleId) => ({ ...valid, roleId })),
  fc
    .oneof(
      fc.string({ maxLength: 30 }),
      fc.date({ noInvalidDate: true }).map((d) => d.toISOString().replace('Z', '')),
    )
    .filter((s) => !/(Z|[+-]\d\d:\d\d)$/.test(s))
    .map((hiredAt) => ({ ...valid, hiredAt })),
  fc.tuple(unknownKey, fc.jsonValue()).map(([key, value]) => ({ ...valid, [key]: value })),
);

/** JSON that is not an object at all. */
const notAnObject = fc.oneof(fc.integer(), fc.string(), fc.boolean(), fc.constant(null), fc.array(fc.jsonValue(), { maxLength: 4 }));

const send = (method: 'POST' | 'PATCH', url: string, payload: unknown) =>
  h.app.inject({ method, url, headers: { ...headers, 'content-type': 'application/json' }, payload: JSON.stringify(payload) });

describe('POST /v1/employees with an invalid body', () => {
  it('always answers 400 problem+json', async () => {
    await fc.assert(
      fc.asyncProperty(fc.oneof(invalidCreateBody, notAnObject), async (body) => {
        const response = await send('POST', '/v1/employees', body);
        expectProblem(response, 400);
      }),
      { numRuns: 150 },
    );
  });
});

describe('PATCH /v1/employees/{id} with an invalid body', () => {
  it('always answers 400 problem+json', async () => {
    const invalidPatch = fc.oneof(
      fc.constant({}),
      fc
        .record({ field: fc.constantFrom('email', 'firstName', 'lastName'), value: fc.oneof(notAString, blank) })
        .map(({ field, value }) => ({ [field]: value })),
      badEmail.map((email) => ({ email })),
      tooLong.map((lastName) => ({ lastName })),
      fc.tuple(unknownKey, fc.jsonValue()).map(([key, value]) => ({ firstName: 'X', [key]: value })),
      notAnObject,
    );
    await fc.assert(
      fc.asyncProperty(invalidPatch, async (body) => {
        expectProblem(await send('PATCH', `/v1/employees/${employeeId}`, body), 400);
      }),
      { numRuns: 100 },
    );
  });
});

describe('POST /v1/employees/{id}/status with an invalid body', () => {
  it('always answers 400 problem+json', async () => {
    const invalidStatus = fc.oneof(
      fc
        .string({ maxLength: 12 })
        .filter((s) => !['active', 'inactive', 'on_leave'].includes(s))
        .map((status) => ({ status })),
      notAString.map((status) => ({ status })),
      fc.tuple(fc.constantFrom('active', 'inactive'), fc.oneof(notAString, blank)).map(([status, reason]) => ({ status, reason })),
      notAnObject,
    );
    await fc.assert(
      fc.asyncProperty(invalidStatus, async (body) => {
        expectProblem(await send('POST', `/v1/employees/${employeeId}/status`, body), 400);
      }),
      { numRuns: 100 },
    );
  });
});

describe('GET /v1/employees with a query string', () => {
  const invalidQuery = fc.oneof(
    fc.integer({ min: 101, max: 1_000_000 }).map((n) => `limit=${n}`),
    fc.integer({ min: -1000, max: 0 }).map((n) => `limit=${n}`),
    fc.integer({ min: -1000, max: 0 }).map((n) => `page=${n}`),
    fc
      .string({ minLength: 1, maxLength: 10 })
      .filter((s) => !/^\s*\d+(\.0*)?\s*$/.test(s))
      .map((s) => `page=${encodeURIComponent(s)}`),
    fc
      .string({ maxLength: 10 })
      .filter((s) => !['active', 'inactive', 'on_leave'].includes(s))
      .map((s) => `status=${encodeURIComponent(s)}`),
    fc
      .string({ maxLength: 25 })
      .filter((s) => !/^\d{4}-\d{2}-\d{2}/.test(s))
      .map((s) => `hiredFrom=${encodeURIComponent(s)}`),
    fc.date({ noInvalidDate: true }).map((d) => `hiredTo=${encodeURIComponent(d.toISOString().replace('Z', ''))}`),
    unknownKey
      .filter((k) => !['page', 'limit', 'department', 'status', 'hiredFrom', 'hiredTo', 'minPosition'].includes(k))
      .map((k) => `${encodeURIComponent(k)}=1`),
  );

  it('answers 400 problem+json for every invalid parameter', async () => {
    await fc.assert(
      fc.asyncProperty(invalidQuery, async (query) => {
        expectProblem(await h.app.inject({ method: 'GET', url: `/v1/employees?${query}`, headers }), 400);
      }),
      { numRuns: 150 },
    );
  });

  it('never answers 5xx, whatever the parameters', async () => {
    const key = fc.constantFrom('page', 'limit', 'department', 'status', 'hiredFrom', 'hiredTo', 'x');
    const anyQuery = fc
      .array(fc.tuple(key, fc.string({ maxLength: 30 })), { maxLength: 5 })
      .map((pairs) => pairs.map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join('&'));
    await fc.assert(
      fc.asyncProperty(anyQuery, async (query) => {
        const response = await h.app.inject({ method: 'GET', url: `/v1/employees?${query}`, headers });
        expect(response.statusCode).toBeLessThan(500);
        if (response.statusCode !== 200) expectProblem(response, 400);
      }),
      { numRuns: 200 },
    );
  });
});
