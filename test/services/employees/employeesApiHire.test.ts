import { describe, expect, it } from 'vitest';
import { withTenant } from '../../../shared/db/pool.ts';
import { listRoles } from '../../../services/auth/roles.ts';
import { findUserByEmail } from '../../../services/auth/users.ts';
import { expectProblem } from '../../support/harness/employees.ts';
import { useEmployeesApi, type Employee } from '../../support/harness/employeesApi.ts';
import { waitFor } from '../../support/waitFor.ts';

/** POST /v1/employees through the gateway, on real PostgreSQL with the live projector. */
const api = useEmployeesApi();
const { uniqueEmail, hire, hired } = api;

describe('POST /v1/employees', () => {
  describe('when the body is valid', () => {
    it('answers 201 with Location, ETag, log position and the employee built from the events', async () => {
      const { headers } = await api.h.tenant();
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
      const { headers } = await api.h.tenant();
      const { employee } = await hired(headers, { hiredAt: '2019-06-30T23:00:00+02:00' });
      expect(employee.hiredAt).toBe('2019-06-30T21:00:00.000Z');
    });

    it('records a missing department as null', async () => {
      const { headers } = await api.h.tenant();
      const { employee } = await hired(headers, { department: undefined });
      expect(employee.department).toBeNull();
    });

    it('assigns a known roleId to the person (users.role_id) and records it in the stream', async () => {
      const { headers, tenant } = await api.h.tenant('admin');
      const roles = await withTenant(api.h.db.pool, tenant.tenantId, (tx) => listRoles(tx, tenant.tenantId));
      const analyst = roles.find((r) => r.name === 'analyst');
      const email = uniqueEmail('analyst');
      const response = await hire(headers, { email, roleId: analyst?.id });
      expect(response.statusCode, response.body).toBe(201);
      expect(response.headers.etag).toBe('"1"');
      // Applied by the role reactor, shortly after the event.
      const user = await waitFor(async () => {
        const found = await withTenant(api.h.db.pool, tenant.tenantId, (tx) => findUserByEmail(tx, tenant.tenantId, email));
        return found?.role === 'analyst' && found;
      });
      expect(user.role).toBe('analyst');
    });
  });

  describe('when the email is taken in the tenant', () => {
    it('answers 409, whatever the case of the address', async () => {
      const { headers } = await api.h.tenant();
      const email = uniqueEmail('Grace');
      await hired(headers, { email });
      expectProblem(await hire(headers, { email: email.toUpperCase() }), 409);
    });

    it('does not stop another tenant from using it', async () => {
      const first = await api.h.tenant();
      const second = await api.h.tenant();
      const email = uniqueEmail('shared');
      await hired(first.headers, { email });
      await hired(second.headers, { email });
    });
  });

  describe('when an hr_manager sends a roleId', () => {
    it("answers 403 and changes nobody's role: only admins assign roles (regression: hr_manager could make itself admin)", async () => {
      const { headers, tenant } = await api.h.tenant('hr_manager');
      const roles = await withTenant(api.h.db.pool, tenant.tenantId, (tx) => listRoles(tx, tenant.tenantId));
      const admin = roles.find((r) => r.name === 'admin');
      const email = uniqueEmail('escalate');
      expectProblem(await hire(headers, { email, roleId: admin?.id }), 403);
      expect(await withTenant(api.h.db.pool, tenant.tenantId, (tx) => findUserByEmail(tx, tenant.tenantId, email))).toBeNull();
      await hired(headers, { email }); // nothing was reserved either
    });
  });

  describe('when the roleId names no role of the tenant', () => {
    it('answers 422 and creates nothing', async () => {
      const { headers } = await api.h.tenant('admin');
      const email = uniqueEmail('norole');
      expectProblem(await hire(headers, { email, roleId: '00000000-0000-4000-8000-000000000000' }), 422);
      await hired(headers, { email }); // the address was not left reserved
    });

    it("answers 422 for another tenant's role", async () => {
      const other = await api.h.tenant();
      const roles = await withTenant(api.h.db.pool, other.tenant.tenantId, (tx) => listRoles(tx, other.tenant.tenantId));
      const { headers } = await api.h.tenant('admin');
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
      const { headers } = await api.h.tenant();
      const problem = expectProblem(await hire(headers, patch), 400);
      expect(problem.errors).toEqual(expect.arrayContaining([expect.objectContaining({ path: expect.stringMatching(/^body/) })]));
    });

    it('answers 400 for a body that is not JSON', async () => {
      const { headers } = await api.h.tenant();
      const response = await api.h.app.inject({
        method: 'POST',
        url: '/v1/employees',
        headers: { ...headers, 'content-type': 'application/json' },
        payload: '{"email":',
      });
      expectProblem(response, 400);
    });

    it('answers 415 for a body that is not JSON at all', async () => {
      const { headers } = await api.h.tenant();
      const response = await api.h.app.inject({
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
      const { as } = await api.h.tenant();
      expectProblem(await hire(await as('employee')), 403);
    });

    it('answers 401 without a token', async () => {
      const { tenant } = await api.h.tenant();
      const response = await hire({ 'x-tenant': tenant.slug });
      expectProblem(response, 401);
      expect(response.headers['www-authenticate']).toMatch(/^Bearer/);
    });
  });
});
