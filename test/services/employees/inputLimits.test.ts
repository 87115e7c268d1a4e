import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isStorableText } from '../../../shared/validation.ts';
import { createTestUser } from '../../support/auth.ts';
import { createEmployeesHarness, expectProblem, type EmployeesHarness } from '../../support/harness/employees.ts';

/**
 * Input limits at the employees and auth edge, and two regressions: NUL and lone surrogates
 * became 500s, and dates read back wrong.
 */
type Employee = { id: string; hiredAt: string };
type Page = { data: Employee[]; meta: { total: number } };

let h: EmployeesHarness;
beforeAll(async () => {
  h = await createEmployeesHarness({ readWaitMs: 5_000 });
});
afterAll(async () => {
  await h?.close();
});

let counter = 0;
const uniqueEmail = () => `limits-${Date.now().toString(36)}-${counter++}@example.test`;
const NUL = 'a\u0000b';
const LONE_HIGH = 'a\uD800b';
const LONE_LOW = '\uDC00';

const json = (payload: unknown) => JSON.stringify(payload);

async function hire(headers: Record<string, string>, body: Record<string, unknown> = {}) {
  return h.app.inject({
    method: 'POST',
    url: '/v1/employees',
    headers: { ...headers, 'content-type': 'application/json' },
    payload: json({ email: uniqueEmail(), firstName: 'Ada', lastName: 'Lovelace', department: 'engineering', ...body }),
  });
}

async function hired(headers: Record<string, string>, body: Record<string, unknown> = {}) {
  const response = await hire(headers, body);
  expect(response.statusCode, response.body).toBe(201);
  return { employee: response.json<Employee>(), position: String(response.headers['x-log-position']) };
}

/** A 400 problem whose `errors` name `path`. */
function expectFieldError(response: Parameters<typeof expectProblem>[0], path: string) {
  const body = expectProblem(response, 400);
  expect(body.errors, response.body).toEqual(expect.arrayContaining([expect.objectContaining({ path })]));
}

describe('NUL and lone surrogates are 400s naming the field, not 500s', () => {
  it('NUL in department query is a 400 not a 500', async () => {
    const { headers } = await h.tenant();
    expectFieldError(await h.app.inject({ method: 'GET', url: '/v1/employees?department=%00', headers }), 'querystring.department');
    expectFieldError(
      await h.app.inject({ method: 'GET', url: `/v1/employees?department=${encodeURIComponent(NUL)}`, headers }),
      'querystring.department',
    );
  });

  for (const field of ['firstName', 'lastName', 'department'] as const) {
    for (const [what, value] of [
      ['NUL', NUL],
      ['a lone high surrogate', LONE_HIGH],
      ['a lone low surrogate', LONE_LOW],
    ] as const) {
      it(`${what} in ${field} on POST and PATCH is a 400`, async () => {
        const { headers } = await h.tenant();
        expectFieldError(await hire(headers, { [field]: value }), `body.${field}`);
        const { employee } = await hired(headers);
        const patch = await h.app.inject({
          method: 'PATCH',
          url: `/v1/employees/${employee.id}`,
          headers: { ...headers, 'content-type': 'application/json' },
          payload: json({ [field]: value }),
        });
        expectFieldError(patch, `body.${field}`);
      });
    }
  }

  it('NUL or a lone surrogate in a status reason is a 400', async () => {
    const { headers } = await h.tenant();
    const { employee } = await hired(headers);
    for (const reason of [NUL, LONE_HIGH]) {
      const response = await h.app.inject({
        method: 'POST',
        url: `/v1/employees/${employee.id}/status`,
        headers: { ...headers, 'content-type': 'application/json' },
        payload: json({ status: 'on_leave', reason }),
      });
      expectFieldError(response, 'body.reason');
    }
  });

  it('NUL or a lone surrogate in the login email is a 400', async () => {
    const { tenant } = await h.tenant();
    const user = await createTestUser(h.db.pool, tenant, 'employee');
    for (const email of [`${user.email}\u0000`, `\uD800${user.email}`]) {
      const response = await h.app.inject({
        method: 'POST',
        url: '/v1/auth/login',
        headers: { 'x-tenant': tenant.slug, 'content-type': 'application/json' },
        payload: json({ email, password: user.password }),
      });
      expectFieldError(response, 'body.email');
    }
  });

  it('keeps characters outside the BMP (valid surrogate pairs)', async () => {
    const { headers } = await h.tenant();
    const { employee } = await hired(headers, { firstName: 'Zoë 😀' });
    const history = await h.app.inject({ method: 'GET', url: `/v1/employees/${employee.id}/history`, headers });
    expect(history.json<{ data: Array<{ data: { firstName?: string } }> }>().data[0]?.data.firstName).toBe('Zoë 😀');
  });
});

describe('documented maximum lengths', () => {
  it('answers 400 naming the field one character past each limit, and accepts the limit itself', async () => {
    const { headers } = await h.tenant();
    expectFieldError(await hire(headers, { firstName: 'x'.repeat(101) }), 'body.firstName');
    expectFieldError(await hire(headers, { department: 'd'.repeat(101) }), 'body.department');
    expectFieldError(await hire(headers, { email: `${'e'.repeat(310)}@example.test` }), 'body.email');
    expect((await hire(headers, { firstName: 'x'.repeat(100), department: 'd'.repeat(100) })).statusCode).toBe(201);
    const query = await h.app.inject({ method: 'GET', url: `/v1/employees?department=${'d'.repeat(10_000)}`, headers });
    expectFieldError(query, 'querystring.department');
  });
});

describe('query strings', () => {
  it('answers 400 for a repeated key rather than picking one', async () => {
    const { headers } = await h.tenant();
    for (const query of ['status=active&status=inactive', 'department=a&department=b', 'page=1&page=2', 'limit=1e400', 'page=1.5']) {
      expectProblem(await h.app.inject({ method: 'GET', url: `/v1/employees?${query}`, headers }), 400);
    }
  });
});

describe('headers', () => {
  it('answers 400 for a malformed If-Match, 412 for a well-formed one that names no revision', async () => {
    const { headers } = await h.tenant();
    const { employee } = await hired(headers);
    const patch = (ifMatch: string) =>
      h.app.inject({
        method: 'PATCH',
        url: `/v1/employees/${employee.id}`,
        headers: { ...headers, 'if-match': ifMatch },
        payload: { firstName: 'Ada' },
      });
    expectFieldError(await patch('0'), 'headers.if-match');
    expectFieldError(await patch(`"${'9'.repeat(300)}"`), 'headers.if-match');
    expectProblem(await patch('W/"0"'), 412);
  });

  it('answers 400 for a malformed X-Min-Position and X-Tenant', async () => {
    const { headers } = await h.tenant();
    expectFieldError(
      await h.app.inject({ method: 'GET', url: '/v1/employees', headers: { ...headers, 'x-min-position': '1-2-3' } }),
      'headers.x-min-position',
    );
    expectFieldError(
      await h.app.inject({ method: 'GET', url: '/v1/employees', headers: { ...headers, 'x-tenant': `${'t'.repeat(64)}` } }),
      'headers.x-tenant',
    );
    expectFieldError(
      await h.app.inject({ method: 'GET', url: '/v1/employees', headers: { ...headers, 'x-tenant': 'a\u0000b' } }),
      'headers.x-tenant',
    );
  });
});

describe('instants outside the allowed years', () => {
  for (const hiredAt of [
    '0000-06-01T00:00:00Z',
    '0045-03-01T00:00:00Z',
    '9999-12-31T23:00:00-05:00',
    '1899-12-31T23:59:59.999Z',
    '1900-01-01T00:30:00+01:00',
  ]) {
    it(`hiredAt ${hiredAt} is a 400 before it reaches an event`, async () => {
      const { headers } = await h.tenant();
      expectFieldError(await hire(headers, { hiredAt }), 'body.hiredAt');
    });
  }

  it('refuses hire-date filters outside 1900–9999', async () => {
    const { headers } = await h.tenant();
    for (const bound of ['1899-12-31', '0045-03-01', '10000-01-01', '9999-12-31T23:00:00-05:00']) {
      expectProblem(await h.app.inject({ method: 'GET', url: `/v1/employees?hiredFrom=${encodeURIComponent(bound)}`, headers }), 400);
    }
  });
});

describe('hire dates round-trip exactly (regression: years below 100 came back as 19xx)', () => {
  for (const hiredAt of ['1900-01-01T00:00:00.000Z', '1969-12-31T23:59:59.999Z', '9999-12-31T23:59:59.000Z']) {
    it(`hire date ${hiredAt}: POST, GET and the hire-date filters agree`, async () => {
      const { headers } = await h.tenant();
      const { employee, position } = await hired(headers, { hiredAt });
      expect(employee.hiredAt).toBe(hiredAt);

      const single = await h.app.inject({
        method: 'GET',
        url: `/v1/employees/${employee.id}`,
        headers: { ...headers, 'x-min-position': position },
      });
      expect(single.statusCode, single.body).toBe(200);
      expect(single.json<Employee>().hiredAt).toBe(hiredAt);

      const day = hiredAt.slice(0, 10);
      for (const query of [`hiredFrom=${hiredAt}&hiredTo=${hiredAt}`, `hiredFrom=${day}&hiredTo=${day}`]) {
        const list = await h.app.inject({
          method: 'GET',
          url: `/v1/employees?${query}`,
          headers: { ...headers, 'x-min-position': position },
        });
        expect(list.statusCode, list.body).toBe(200);
        expect(list.json<Page>().data.map((e) => [e.id, e.hiredAt])).toEqual([[employee.id, hiredAt]]);
      }
    });
  }

  it('an offset hire date is answered and read back as the same UTC instant', async () => {
    const { headers } = await h.tenant();
    const { employee, position } = await hired(headers, { hiredAt: '1900-01-01T05:30:00+05:30' });
    expect(employee.hiredAt).toBe('1900-01-01T00:00:00.000Z');
    const single = await h.app.inject({
      method: 'GET',
      url: `/v1/employees/${employee.id}`,
      headers: { ...headers, 'x-min-position': position },
    });
    expect(single.json<Employee>().hiredAt).toBe('1900-01-01T00:00:00.000Z');
  });
});

describe('whatever text a client sends as a name', () => {
  it('is either refused with a 400 naming the field or stored and answered exactly (trimmed)', async () => {
    const { headers } = await h.tenant();
    const text = fc.oneof(
      fc.string({ unit: 'binary', maxLength: 110 }),
      fc.array(fc.constantFrom('\u0000', '\uD83D', '\uDE00', '😀', 'é', ' ', 'a'), { maxLength: 60 }).map((parts) => parts.join('')),
    );
    await fc.assert(
      fc.asyncProperty(text, async (firstName) => {
        const response = await hire(headers, { firstName });
        const trimmed = firstName.trim();
        if (isStorableText(firstName) && trimmed.length >= 1 && trimmed.length <= 100) {
          expect(response.statusCode, response.body).toBe(201);
          const id = response.json<Employee>().id;
          const history = await h.app.inject({ method: 'GET', url: `/v1/employees/${id}/history`, headers });
          expect(history.json<{ data: Array<{ data: { firstName?: string } }> }>().data[0]?.data.firstName).toBe(trimmed);
        } else {
          expectFieldError(response, 'body.firstName');
        }
      }),
      { seed: 6, numRuns: 80 },
    );
  });
});
