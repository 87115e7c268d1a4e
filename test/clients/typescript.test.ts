import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEasClient } from '../../clients/typescript/index.ts';
import { CLIENT_SCHEMA_PATH, generateClientSchema } from '../../scripts/generateClient.ts';
import { createEmployeesHarness, type EmployeesHarness } from '../support/harness/employees.ts';
import { createTestUser } from '../support/auth.ts';
import { useTestEventStore } from '../support/database.ts';

describe('the generated TypeScript client', () => {
  const ctx = useTestEventStore();

  it('is up to date with the OpenAPI document (else: npm run client:generate)', async () => {
    const generated = await generateClientSchema(ctx.db.pool);
    const checkedIn = await readFile(CLIENT_SCHEMA_PATH, 'utf8');
    expect(checkedIn === generated, 'clients/typescript/schema.d.ts is stale: run `npm run client:generate` and commit it').toBe(true);
  });
});

describe('when an integrator uses the typed client against a running service', () => {
  let harness: EmployeesHarness;
  let baseUrl: string;

  beforeAll(async () => {
    harness = await createEmployeesHarness();
    baseUrl = await harness.app.listen({ host: '127.0.0.1', port: 0 });
  });
  afterAll(async () => harness?.close());

  it('signs in, creates and reads employees, and refreshes an expired access token by itself', async () => {
    const { tenant } = await harness.tenant();
    const user = await createTestUser(harness.db.pool, { tenantId: tenant.tenantId, slug: tenant.slug }, 'hr_manager');
    const sessions: Array<string | null> = [];
    const eas = createEasClient({ baseUrl, tenant: tenant.slug, onSession: (s) => sessions.push(s?.accessToken ?? null) });
    await eas.login(user.email, user.password);

    const created = await eas.api.POST('/v1/employees', {
      body: { email: 'ada@example.test', firstName: 'Ada', lastName: 'Lovelace', department: 'eng' },
    });
    expect(created.response.status).toBe(201);
    const id = created.data?.id;
    if (!id) throw new Error(`no id in ${JSON.stringify(created.error)}`);

    // A single read folds the employee's stream (always consistent); lists come from the read
    // model, so the list below passes the write's log position to wait for it.
    const position = created.response.headers.get('x-log-position');
    if (!position) throw new Error('no x-log-position on the create');
    const read = await eas.api.GET('/v1/employees/{id}', { params: { path: { id } } });
    expect(read.data, JSON.stringify(read.error)).toMatchObject({ id, email: 'ada@example.test', status: 'active' });

    // An access token the service no longer accepts (as after 15 minutes): one refresh, one retry.
    const before = eas.session();
    if (!before) throw new Error('no session');
    eas.useSession({ ...before, accessToken: `${before.accessToken}x` });
    const listed = await eas.api.GET('/v1/employees', { params: { query: { limit: 10 } }, headers: { 'x-min-position': position } });
    expect(listed.response.status).toBe(200);
    expect(listed.response.headers.get('x-consistency')).toBe('consistent');
    expect(listed.data?.data.map((e) => e.id)).toContain(id);
    expect(eas.session()?.refreshToken).not.toBe(before.refreshToken);

    const missing = await eas.api.GET('/v1/employees/{id}', { params: { path: { id: '01ARZ3NDEKTSV4RRFFQ69G5FAV' } } });
    expect(missing.response.status).toBe(404);
    expect(missing.error).toMatchObject({ status: 404 });

    await eas.logout();
    expect(eas.session()).toBeNull();
    expect(sessions.at(-1)).toBeNull();
    await expect(eas.login(user.email, 'wrong password')).rejects.toMatchObject({ status: 401 });
  });
});
