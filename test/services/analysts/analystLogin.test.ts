import { createHash, createHmac, pbkdf2Sync } from 'node:crypto';
import pg from 'pg';
import { monotonicFactory } from 'ulid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hireEmployee } from '../../../services/employees/commands.ts';
import { connectionString } from '../../../services/ops/analysts.ts';
import { allProjections } from '../../../services/projectors.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { provisionTenant, type TestTenant } from '../../support/auth.ts';
import { createTestDatabase, sqlAt, type TestDatabase } from '../../support/database.ts';
import { runOps, runOpsWithInput } from '../../support/processes.ts';
import { testEmailHash } from '../../support/personalData.ts';

/**
 * `ops analysts grant` / `revoke` against real PostgreSQL, connecting as the login it creates:
 * the tenant's rows of the read models and nothing else, whatever the session sets. Roles are
 * cluster-wide, so the logins are named after this file's fresh tenants and dropped at the end.
 */
const nextId = monotonicFactory();
let db: TestDatabase;
let store: EventStore;
let a: TestTenant;
let b: TestTenant;
const created: string[] = [];

async function hire(tenantId: string, department: string): Promise<void> {
  const employeeId = nextId();
  await hireEmployee(
    { store, emailHash: testEmailHash, assertRoleExists: async () => undefined },
    {
      type: 'HireEmployee',
      data: { employeeId, email: `${employeeId}@example.test`, firstName: 'A', lastName: 'B', department },
      metadata: { tenantId, actor: 'spec', now: new Date().toISOString() },
    },
  );
}

/** Grants `tenant` a login through the CLI; its name and printed connection string. */
async function grant(tenant: TestTenant, ...args: string[]): Promise<{ login: string; url: string; stdout: string }> {
  const result = await runOps(db.url, 'analysts', 'grant', tenant.slug, ...args);
  expect(result.code, result.stderr).toBe(0);
  const url = result.stdout.split('\n').find((l) => l.startsWith('postgres'));
  if (!url) throw new Error(`no connection string in: ${result.stdout}`);
  const login = decodeURIComponent(new URL(url).username);
  created.push(login);
  return { login, url, stdout: result.stdout };
}

async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined); // a terminated session reports here too
  await client.connect();
  return client;
}

const tenantsIn = async (client: pg.Client, table: string) =>
  (await client.query<{ tenant_id: string; n: number }>(`select tenant_id, count(*)::int as n from ${table} group by 1 order by 1`)).rows;

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool);
  [a, b] = [await provisionTenant(db.pool), await provisionTenant(db.pool)];
  await hire(a.tenantId, 'sales');
  await hire(a.tenantId, 'ops');
  await hire(b.tenantId, 'sales');
  // The read models' tables, as a projector's start builds them.
  for (const projection of allProjections) await replayProjection(db.pool, store, projection);
  await sqlAt(
    db.url,
    `insert into kpi_usage_days (tenant_id, day, samples, errors, duration_sum_ms, latency_sketch)
     values ($1, '2026-01-01', 10, 0, 1, '\\x00'), ($2, '2026-01-01', 20, 0, 1, '\\x00')`,
    [a.tenantId, b.tenantId],
  );
  await sqlAt(db.url, 'analyze employees');
}, 120_000);

afterAll(async () => {
  for (const login of created) await sqlAt(db.url, `drop role if exists "${login}"`).catch(() => undefined);
  await store?.close();
  await db?.drop();
});

describe("when an analyst connects with the tenant's login", () => {
  let login: string;
  let analyst: pg.Client;
  beforeAll(async () => {
    const granted = await grant(a);
    login = granted.login;
    expect(granted.stdout).toContain(`created analyst login ${login} for tenant ${a.slug}`);
    analyst = await connect(granted.url);
  }, 60_000);
  afterAll(() => analyst?.end().catch(() => undefined));

  it("reads its tenant's rows of the employee, workforce and KPI read models, and no other tenant's", async () => {
    expect(await tenantsIn(analyst, 'employees')).toEqual([{ tenant_id: a.tenantId, n: 2 }]);
    expect(await tenantsIn(analyst, 'employee_counts')).toEqual([{ tenant_id: a.tenantId, n: 2 }]);
    expect(await tenantsIn(analyst, 'kpi_usage_days')).toEqual([{ tenant_id: a.tenantId, n: 1 }]);
    expect(await tenantsIn(analyst, 'employee_versions')).toEqual([{ tenant_id: a.tenantId, n: 2 }]);
    expect(await tenantsIn(analyst, 'workforce_day_counts')).toEqual([{ tenant_id: a.tenantId, n: 2 }]);
    // Both hires are active from today: one row of the totals over every department.
    expect(await tenantsIn(analyst, 'workforce_day_totals')).toEqual([{ tenant_id: a.tenantId, n: 1 }]);
    expect(await tenantsIn(analyst, 'workforce_month_totals')).toEqual([{ tenant_id: a.tenantId, n: 1 }]);
  });

  it('reads no more after setting app.tenant_id to another tenant, or switching to its group role', async () => {
    await analyst.query(`set app.tenant_id = '${b.tenantId}'`);
    expect(await tenantsIn(analyst, 'employees')).toEqual([{ tenant_id: a.tenantId, n: 2 }]);
    expect((await analyst.query(`select count(*)::int as n from employees where tenant_id = $1`, [b.tenantId])).rows).toEqual([{ n: 0 }]);
    await analyst.query('set role eas_analysts');
    expect(await tenantsIn(analyst, 'kpi_usage_days')).toEqual([{ tenant_id: a.tenantId, n: 1 }]);
    await analyst.query('reset role');
    await analyst.query('reset app.tenant_id');
  });

  it('may not read the event log, the logins, users or any other table', async () => {
    for (const table of ['es_events', 'analyst_logins', 'users', 'tenants', 'employee_changes', 'projection_checkpoints'])
      await expect(analyst.query(`select * from ${table} limit 1`), table).rejects.toThrow(/permission denied/);
    // Nor the planner's statistics of a table it reads, which would show other tenants' values.
    expect((await analyst.query(`select count(*)::int as n from pg_stats where tablename = 'employees'`)).rows).toEqual([{ n: 0 }]);
  });

  it('may not write, even after turning its read-only default off', async () => {
    await expect(analyst.query(`delete from kpi_usage_days`)).rejects.toThrow(/read-only transaction/);
    await analyst.query('set default_transaction_read_only = off');
    await expect(analyst.query(`delete from kpi_usage_days`)).rejects.toThrow(/permission denied/);
    await expect(analyst.query(`update employees set department = 'x'`)).rejects.toThrow(/permission denied/);
    await expect(analyst.query(`create table mine (a int)`)).rejects.toThrow(/permission denied/);
    await expect(analyst.query(`create table public.mine (a int)`)).rejects.toThrow(/permission denied for schema public/);
    await expect(analyst.query(`select lo_from_bytea(0, 'kept')`)).rejects.toThrow(/permission denied for function/);
    await expect(analyst.query(`select lo_create(0)`)).rejects.toThrow(/permission denied for function/);
    await analyst.query('reset default_transaction_read_only');
    expect((await sqlAt<{ n: number }>(db.url, `select sum(samples)::int as n from kpi_usage_days`))[0]?.n).toBe(30);
  });

  it('may not take advisory locks or notify, which would stall or flood the service', async () => {
    // The keys of the migration lock and of an event stream's append lock, in every form.
    for (const statement of [
      'select pg_advisory_lock(7412019)',
      'select pg_try_advisory_lock(7412019)',
      'select pg_advisory_lock_shared(7412019)',
      'select pg_try_advisory_xact_lock(1, 2)',
      `select pg_advisory_xact_lock(hashtextextended('employee-x', 0))`,
      `select pg_notify('projection_checkpoints', 'employees 1-1')`,
    ])
      await expect(analyst.query(statement), statement).rejects.toThrow(/permission denied for function/);
    // The service's own roles keep them: the owner, and the tenant role its transactions switch to.
    const [kept] = await sqlAt<{ owner: boolean; tenant: boolean }>(
      db.url,
      `select has_function_privilege(current_user, 'pg_advisory_xact_lock(bigint)', 'execute') as owner,
              has_function_privilege('eas_tenant', 'pg_notify(text, text)', 'execute') as tenant`,
    );
    expect(kept).toEqual({ owner: true, tenant: true });
  });

  it('has statement and idle timeouts, a connection limit, and no way around row-level security', async () => {
    expect((await analyst.query('show statement_timeout')).rows).toEqual([{ statement_timeout: '30s' }]);
    expect((await analyst.query('show idle_in_transaction_session_timeout')).rows).toEqual([
      { idle_in_transaction_session_timeout: '30s' },
    ]);
    expect((await analyst.query('show idle_session_timeout')).rows).toEqual([{ idle_session_timeout: '10min' }]);
    const [role] = await sqlAt(db.url, `select rolconnlimit, rolbypassrls, rolsuper, rolcreaterole from pg_roles where rolname = $1`, [
      login,
    ]);
    expect(role).toEqual({ rolconnlimit: 5, rolbypassrls: false, rolsuper: false, rolcreaterole: false });
  });

  it('is gone after revoke: the role, its tenant binding and its open session, and no other session', async () => {
    const bystander = await connect(db.url);
    // What kept a role from being dropped when revoke dropped it before ending its sessions.
    await analyst.query('set default_transaction_read_only = off');
    await analyst.query('create temporary table scratch (a int)');
    const revoked = await runOps(db.url, 'analysts', 'revoke', a.slug);
    expect(revoked.code, revoked.stderr).toBe(0);
    expect(revoked.stdout).toContain(`dropped analyst login ${login} of tenant ${a.slug}; 1 open sessions ended`);
    expect(await sqlAt(db.url, `select from pg_roles where rolname = $1`, [login])).toHaveLength(0);
    expect(await sqlAt(db.url, `select from analyst_logins`)).toHaveLength(0);
    expect(await sqlAt(db.url, `select from analyst_logins_revoked`)).toHaveLength(0);
    await expect(analyst.query('select 1')).rejects.toThrow();
    await expect(connect(connectionString(db.url, login, undefined))).rejects.toThrow(/does not exist/);
    expect((await bystander.query('select 1 as one')).rows).toEqual([{ one: 1 }]);
    await bystander.end();
  });
});

describe("the analysts' group role", () => {
  it('reads the employee, workforce and KPI read models and nothing else, each behind its restrictive policy', async () => {
    const readable = await sqlAt<{ name: string; walled: boolean; rls: boolean; writes: boolean }>(
      db.url,
      `select c.relname as name, c.relrowsecurity as rls,
              has_table_privilege('eas_analysts', c.oid, 'insert, update, delete, truncate, references, trigger') as writes,
              exists (select from pg_policies p where p.tablename = c.relname and p.permissive = 'RESTRICTIVE'
                      and 'eas_analysts' = any(p.roles) and p.qual like '%analyst_tenant_id()%') as walled
       from pg_class c
       where c.relnamespace = current_schema()::regnamespace and c.relkind in ('r', 'p', 'v', 'm', 'f')
         and has_table_privilege('eas_analysts', c.oid, 'select')`,
    );
    expect(readable.map((t) => t.name).sort()).toEqual(
      [
        'employees',
        'employee_counts',
        'employee_month_counts',
        'employee_day_counts',
        'employee_versions',
        'workforce_day_counts',
        'workforce_month_counts',
        'workforce_day_totals',
        'workforce_month_totals',
        'kpi_billing_facts',
        'kpi_subscriptions',
        'kpi_subscription_periods',
        'kpi_mrr_movements',
        'kpi_billing_tenants',
        'kpi_usage_minutes',
        'kpi_usage_hours',
        'kpi_usage_days',
        'kpi_daily_users',
        'kpi_user_activity',
        'kpi_tenant_usage',
      ].sort(),
    );
    expect(readable.filter((t) => !t.walled || !t.rls || t.writes)).toEqual([]);
  });
});

describe('when the operator gives the password on stdin', () => {
  it('stores only its SCRAM verifier and prints the connection string without it', { timeout: 60_000 }, async () => {
    const login = `analyst_${b.slug.replaceAll('-', '_')}_bi`;
    const password = 'a-given-password-of-some-length';
    created.push(login);
    const result = await runOpsWithInput(db.url, `${password}\n`, 'analysts', 'grant', b.slug, '--login', login, '--password-stdin');
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).not.toContain(password);
    expect(result.stdout).toContain(`${login}@`);
    const [stored] = await sqlAt<{ verifier: string }>(db.url, `select rolpassword as verifier from pg_authid where rolname = $1`, [login]);
    const [, iterations = '', salt = '', storedKey = ''] = /^SCRAM-SHA-256\$(\d+):([^$]+)\$([^:]+):/.exec(stored?.verifier ?? '') ?? [];
    const salted = pbkdf2Sync(password, Buffer.from(salt, 'base64'), Number(iterations), 32, 'sha256');
    const clientKey = createHmac('sha256', salted).update('Client Key').digest();
    expect(createHash('sha256').update(clientKey).digest('base64')).toBe(storedKey);

    const short = await runOpsWithInput(db.url, 'too-short\n', 'analysts', 'grant', b.slug, '--login', `${login}_2`, '--password-stdin');
    expect([short.code, short.stderr]).toEqual([1, 'error: the password has at least 16 characters\n']);
    const again = await runOpsWithInput(db.url, `${password}\n`, 'analysts', 'grant', b.slug, '--login', login, '--password-stdin');
    expect(again.code).toBe(1);
    expect(again.stderr).toContain(`a database role ${login} already exists`);
    const revoked = await runOps(db.url, 'analysts', 'revoke', b.slug, '--login', login);
    expect(revoked.code, revoked.stderr).toBe(0);
  });
});
