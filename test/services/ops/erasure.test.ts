import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { monotonicFactory } from 'ulid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createDatabasePool, withTenant } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { createSealingEventStore } from '../../../shared/event-store/sealing.ts';
import { createDataKeyStore, type DataKeyStore } from '../../../shared/personal-data/dataKeys.ts';
import { employeePersonalData, employeeStreamId } from '../../../services/employees/contract.ts';
import { hireEmployee } from '../../../services/employees/commands.ts';
import { issueRefreshToken } from '../../../services/auth/refreshTokens.ts';
import { createEmptyTestDatabase, createTestDatabase, sqlAt, type BareTestDatabase, type TestDatabase } from '../../support/database.ts';
import { createTestUser, provisionTenant } from '../../support/auth.ts';
import { runOpsWith } from '../../support/processes.ts';
import { testEmailHash, testKeyEncryptionKeys, testPersonalDataEnv } from '../../support/personalData.ts';

/**
 * The erasure commands of the ops CLI, run as an operator runs them (a child process, the real
 * database): a tenant's offboarding, and erasures re-applied to a database restored from a backup
 * taken before them. The CLI shares the test's key-encryption key, as every process of one
 * deployment does.
 */
const nextId = monotonicFactory();
let db: TestDatabase;
let keys: DataKeyStore;
let store: EventStore;
let work: string;
const restored: BareTestDatabase[] = [];

const ops = (url: string, ...args: string[]) =>
  runOpsWith({ ...process.env, DATABASE_URL: url, LOG_LEVEL: 'warn', ...testPersonalDataEnv, DATA_DIR: work }, ...args);

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'ops-erasure-'));
  db = await createTestDatabase();
  keys = createDataKeyStore(db.pool, testKeyEncryptionKeys);
  store = createSealingEventStore(createPostgresEventStore(db.pool), { keys, policy: employeePersonalData });
});
afterAll(async () => {
  await store?.close();
  await keys?.close?.();
  for (const r of restored) await r.drop();
  await db?.drop();
  await rm(work, { recursive: true, force: true });
});

async function hire(tenantId: string, email: string): Promise<string> {
  const employeeId = nextId();
  await hireEmployee(
    { store, emailHash: testEmailHash, assertRoleExists: async () => undefined },
    {
      type: 'HireEmployee',
      data: { employeeId, email, firstName: 'Op', lastName: 'Erase' },
      metadata: { tenantId, actor: 'spec', now: new Date().toISOString() },
    },
  );
  return employeeId;
}

const types = async (eventStore: EventStore, tenantId: string, employeeId: string) =>
  (await eventStore.readStream(employeeStreamId(tenantId, employeeId))).map((e) => e.type);

/** A `pg_dump` of the test's database, as a file under `work`. */
async function backup(name: string): Promise<string> {
  const file = join(work, `${name}.sql`);
  const { stdout } = await promisify(execFile)('pg_dump', ['--dbname', db.url, '--no-owner'], { maxBuffer: 256 * 1024 * 1024 });
  await writeFile(file, stdout);
  return file;
}

/** The restore: a new database from `file`. */
async function restore(file: string): Promise<BareTestDatabase> {
  const target = await createEmptyTestDatabase();
  restored.push(target);
  await promisify(execFile)('psql', ['--quiet', '--no-psqlrc', '--set', 'ON_ERROR_STOP=1', '--dbname', target.url, '--file', file]);
  return target;
}

const logins = (url: string, tenantId: string) =>
  sqlAt<{ email: string; disabled: boolean }>(
    url,
    'select email, disabled_at is not null as disabled from users where tenant_id = $1 order by email',
    [tenantId],
  );

describe('ops tenants erase <slug>', () => {
  it('erases every employee, forgets and disables every login, shows progress, and a second run finds it done', async () => {
    const { tenantId, slug } = await provisionTenant(db.pool);
    const ids = [
      await hire(tenantId, 'one@offboard.test'),
      await hire(tenantId, 'two@offboard.test'),
      await hire(tenantId, 'three@offboard.test'),
    ];
    await createTestUser(db.pool, { tenantId, slug }, 'admin', { email: 'boss@offboard.test' });
    // Roles are cluster-wide: a name of this run's own.
    const analyst = `analyst_off_${monotonicFactory()().toLowerCase().slice(-10)}`;
    const granted = await ops(db.url, 'analysts', 'grant', slug, '--login', analyst);
    expect(granted.code, granted.stderr).toBe(0);

    const first = await ops(db.url, 'tenants', 'erase', slug);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toContain("1 analysts' database logins revoked");
    expect(await sqlAt(db.url, 'select 1 from pg_roles where rolname = $1', [analyst])).toEqual([]);
    expect(first.stdout).toContain(
      `tenant ${slug}: 3 employees, 3 erased, 0 erased before (done again), 0 not in the log, 0 finished before (skipped); 1 logins forgotten`,
    );
    expect(first.stderr).toContain(`erase ${slug} |`);
    for (const id of ids) {
      expect(await types(store, tenantId, id)).toContain('EmployeeErased');
      expect(await keys.isDestroyed(tenantId, id)).toBe(true);
    }
    const users = await logins(db.url, tenantId);
    expect(users.length).toBeGreaterThan(0);
    for (const user of users) expect(user).toEqual({ email: expect.stringMatching(/^erased-.*@erased\.invalid$/), disabled: true });

    const again = await ops(db.url, 'tenants', 'erase', slug);
    expect(again.code, again.stderr).toBe(0);
    // Everyone in the ledger with a destroyed key was finished: skipped, not erased again.
    expect(again.stdout).toContain(
      '3 employees, 0 erased, 0 erased before (done again), 0 not in the log, 3 finished before (skipped); 0 logins',
    );

    // An offboarding is final: the tenant is given no login, and no database login, again.
    const login = await ops(
      db.url,
      'users',
      'create',
      slug,
      '--email',
      'back@offboard.test',
      '--password',
      'a-long-password',
      '--role',
      'admin',
    );
    expect(login.code).not.toBe(0);
    expect(login.stderr).toContain(`tenant ${slug} was offboarded`);
    const reader = await ops(db.url, 'analysts', 'grant', slug, '--login', `${analyst}_again`);
    expect(reader.code).not.toBe(0);
    expect(reader.stderr).toContain(`tenant ${slug} was offboarded`);
    expect((await logins(db.url, tenantId)).filter((u) => !u.disabled)).toEqual([]);

    // Someone the ledger has but whose key is whole again (a restore) is erased again.
    await sqlAt(db.url, 'delete from personal_data_keys where tenant_id = $1 and subject_id = $2', [tenantId, ids[0]]);
    const third = await ops(db.url, 'tenants', 'erase', slug);
    expect(third.stdout).toContain('3 employees, 0 erased, 1 erased before (done again), 0 not in the log, 2 finished before (skipped)');
  });
});

describe('ops employees reapply-erasures, after restoring a backup taken before an erasure', () => {
  it('erases the person again from a copy of the ledger; without the copy the restored database knows of no erasure', async () => {
    const { tenantId, slug } = await provisionTenant(db.pool);
    const id = await hire(tenantId, 'restored@backup.test');
    const taken = await backup('backup');

    const erased = await ops(db.url, 'employees', 'erase', slug, id);
    expect(erased.code, erased.stderr).toBe(0);
    expect(erased.stdout).toMatch(new RegExp(`^erased ${id} at \\d{4}-`));
    const ledger = await ops(db.url, 'employees', 'erasures');
    const copy = join(work, 'ledger.json');
    await writeFile(copy, ledger.stdout);
    const erasedAt = z
      .object({ employees: z.array(z.object({ employeeId: z.string(), erasedAt: z.string() })) })
      .parse(JSON.parse(ledger.stdout))
      .employees.find((e) => e.employeeId === id)?.erasedAt;

    // The restore: a new database from the backup, where the person is hired and their key whole.
    const target = await restore(taken);
    const pool = await createDatabasePool(target.url);
    try {
      const targetKeys = createDataKeyStore(pool, testKeyEncryptionKeys);
      const targetStore = createSealingEventStore(createPostgresEventStore(pool), { keys: targetKeys, policy: employeePersonalData });
      expect(await types(targetStore, tenantId, id)).not.toContain('EmployeeErased');
      expect(await targetKeys.isDestroyed(tenantId, id)).toBe(false);

      const withoutCopy = await ops(target.url, 'employees', 'reapply-erasures', '--tenant', slug);
      expect(withoutCopy.stdout).toContain('0 erasures re-applied');

      const reapplied = await ops(target.url, 'employees', 'reapply-erasures', '--tenant', slug, '--ledger', copy);
      expect(reapplied.code, reapplied.stderr).toBe(0);
      expect(reapplied.stdout).toMatch(/1 erasures re-applied: 1 erased, 0 erased before/);
      expect(reapplied.stderr).toContain('reapply-erasures |');
      expect(await types(targetStore, tenantId, id)).toContain('EmployeeErased');
      expect(await targetKeys.isDestroyed(tenantId, id)).toBe(true);
      const history = await targetStore.readStream(employeeStreamId(tenantId, id));
      expect(history.find((e) => e.type === 'EmployeeErased')?.data).toEqual({ employeeId: id, erasedAt });
      // The restored ledger has the entry again.
      const entries = await sqlAt<{ employee_id: string }>(target.url, 'select employee_id from employee_erasures where tenant_id = $1', [
        tenantId,
      ]);
      expect(entries.map((e) => e.employee_id)).toEqual([id]);
      await targetStore.close();
    } finally {
      await pool.end();
    }
  });
});

describe('ops employees reapply-erasures, after restoring a backup taken before a tenant was erased', () => {
  it("offboards the tenant again from a copy of the ledgers: its logins, refresh tokens and analysts' logins go again", async () => {
    const tenant = await provisionTenant(db.pool);
    const { tenantId, slug } = tenant;
    const [first, second] = [await hire(tenantId, 'one@restored-tenant.test'), await hire(tenantId, 'two@restored-tenant.test')];
    const admin = await createTestUser(db.pool, tenant, 'admin', { email: 'boss@restored-tenant.test' });
    await createTestUser(db.pool, tenant, 'employee', { email: 'made-by-ops@restored-tenant.test' });
    await withTenant(db.pool, tenantId, (tx) => issueRefreshToken(tx, { tenantId, userId: admin.userId, now: Date.now() }));
    const analyst = `analyst_rt_${monotonicFactory()().toLowerCase().slice(-10)}`;
    expect((await ops(db.url, 'analysts', 'grant', slug, '--login', analyst)).code).toBe(0);
    const taken = await backup(`tenant-${slug}`);

    expect((await ops(db.url, 'tenants', 'erase', slug)).code).toBe(0);
    const ledger = await ops(db.url, 'employees', 'erasures');
    const copy = z
      .object({
        employees: z.array(z.object({ employeeId: z.string() }).loose()),
        tenants: z.array(z.object({ tenantId: z.string() }).loose()),
      })
      .parse(JSON.parse(ledger.stdout));
    expect(copy.tenants.map((t) => t.tenantId)).toContain(tenantId);
    // Refreshed while the offboarding ran: it has the tenant, not yet the second person's erasure.
    const file = join(work, `ledger-tenant-${slug}.json`);
    await writeFile(file, JSON.stringify({ ...copy, employees: copy.employees.filter((e) => e.employeeId !== second) }));

    const target = await restore(taken);
    // A restore that brings the cluster's roles back too (pg_dumpall's globals) has the analyst's login again.
    await sqlAt(db.url, `create role ${analyst} login in role eas_analysts`);
    const before = await logins(target.url, tenantId);
    expect(before.map((u) => u.email)).toContain('boss@restored-tenant.test');
    expect(before.every((u) => !u.disabled)).toBe(true);

    const reapplied = await ops(target.url, 'employees', 'reapply-erasures', '--tenant', slug, '--ledger', file);
    expect(reapplied.code, reapplied.stderr).toBe(0);
    expect(reapplied.stdout).toContain('2 erasures re-applied: 2 erased');
    expect(reapplied.stdout).toContain(
      "1 tenant offboardings re-applied: 2 logins forgotten and disabled; 1 analysts' database logins revoked",
    );
    for (const user of await logins(target.url, tenantId)) {
      expect(user).toEqual({ email: expect.stringMatching(/^erased-.*@erased\.invalid$/), disabled: true });
    }
    const live = 'select 1 from refresh_tokens where tenant_id = $1 and revoked_at is null';
    expect(await sqlAt(target.url, live, [tenantId])).toEqual([]);
    expect(await sqlAt(db.url, 'select 1 from pg_roles where rolname = $1', [analyst])).toEqual([]);
    expect(await sqlAt(target.url, 'select 1 from analyst_logins where tenant_id = $1', [tenantId])).toEqual([]);
    expect(await sqlAt(target.url, 'select 1 from tenant_offboardings where tenant_id = $1', [tenantId])).toHaveLength(1);
    const erased = await sqlAt<{ employee_id: string }>(target.url, 'select employee_id from employee_erasures where tenant_id = $1', [
      tenantId,
    ]);
    expect(erased.map((e) => e.employee_id).sort()).toEqual([first, second].sort());
  });
});

describe('ops employees reapply-erasures, with a ledger copy naming someone the restored log lacks', () => {
  it('records their erasure all the same, so a later copy of the ledger keeps it', async () => {
    const { tenantId, slug } = await provisionTenant(db.pool);
    // Hired and erased after the backup was taken: the restored log has no trace of them.
    const entry = { tenantId, employeeId: nextId(), erasedAt: '2026-02-03T04:05:06.789Z' };
    const copy = join(work, `ledger-absent-${slug}.json`);
    await writeFile(copy, JSON.stringify([entry]));

    const reapplied = await ops(db.url, 'employees', 'reapply-erasures', '--tenant', slug, '--ledger', copy);
    expect(reapplied.code, reapplied.stderr).toBe(0);
    expect(reapplied.stdout).toContain('1 erasures re-applied: 0 erased, 0 erased before (done again), 1 not in the log');

    const ledger = await ops(db.url, 'employees', 'erasures');
    expect(ledger.code, ledger.stderr).toBe(0);
    expect(ledger.stdout).toContain(`"employeeId": "${entry.employeeId}"`);
  });
});

describe('ops erasure commands when a person has no data key at all (a key table older than the log)', () => {
  it('scan the log past their sealed fields and erase them like a person whose key is destroyed', async () => {
    const { tenantId, slug } = await provisionTenant(db.pool);
    const keyless = await hire(tenantId, 'keyless@restore.test');
    const whole = await hire(tenantId, 'whole@restore.test');
    await sqlAt(db.url, 'delete from personal_data_keys where tenant_id = $1 and subject_id = $2', [tenantId, keyless]);

    const reapplied = await ops(db.url, 'employees', 'reapply-erasures', '--tenant', slug);
    expect(reapplied.code, reapplied.stderr).toBe(0);
    expect(reapplied.stdout).toContain('0 erasures re-applied');

    const erased = await ops(db.url, 'tenants', 'erase', slug);
    expect(erased.code, erased.stderr).toBe(0);
    expect(erased.stdout).toContain(`tenant ${slug}: 2 employees, 2 erased`);
    for (const id of [keyless, whole]) expect(await types(store, tenantId, id)).toContain('EmployeeErased');
    expect(await keys.isDestroyed(tenantId, whole)).toBe(true);
  });
});
