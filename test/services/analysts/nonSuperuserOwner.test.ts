import pg from 'pg';
import { monotonicFactory } from 'ulid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hireEmployee } from '../../../services/employees/commands.ts';
import { allMigrations } from '../../../services/migrations.ts';
import { connectionString } from '../../../services/ops/analysts.ts';
import { migrate } from '../../../shared/db/migrate.ts';
import { createDatabasePool, type DatabasePool } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { provisionTenant } from '../../support/auth.ts';
import { createEmptyTestDatabase, sqlAt, type BareTestDatabase } from '../../support/database.ts';
import { runOps } from '../../support/processes.ts';
import { testEmailHash } from '../../support/personalData.ts';

/**
 * The service owned by a role that is not a superuser (CREATEROLE, owner of its database, member of
 * pg_signal_backend), as on a managed PostgreSQL: the migrations apply (those only a superuser may
 * run change nothing), the write path takes its advisory locks and notifies, and an analyst's login
 * that created a large object and holds a temporary table is still revoked whole.
 */
const nextId = monotonicFactory();
let db: BareTestDatabase;
let owner: string;
let ownerUrl: string;
let pool: DatabasePool;
let store: EventStore;

beforeAll(async () => {
  db = await createEmptyTestDatabase();
  owner = `${db.name}_owner`;
  await sqlAt(db.url, `create role "${owner}" login createrole in role pg_signal_backend`);
  await sqlAt(db.url, `alter database "${db.name}" owner to "${owner}"`);
  ownerUrl = connectionString(db.url, owner, undefined);
  await migrate(ownerUrl, allMigrations);
  pool = await createDatabasePool(ownerUrl);
  store = createPostgresEventStore(pool);
}, 120_000);

afterAll(async () => {
  await store?.close();
  await pool?.end();
  await db?.drop();
  const cluster = connectionString(db.url, 'postgres', undefined).replace(/\/[^/]*$/, '/postgres');
  await sqlAt(cluster, `drop role if exists "${owner}"`).catch(() => undefined);
});

describe('when the owner is not a superuser', () => {
  it('hires, and grants and revokes an analyst login that left a large object and a temporary table', { timeout: 90_000 }, async () => {
    const tenant = await provisionTenant(pool);
    const employeeId = nextId();
    await hireEmployee(
      { store, emailHash: testEmailHash, assertRoleExists: async () => undefined },
      {
        type: 'HireEmployee',
        data: { employeeId, email: `${employeeId}@example.test`, firstName: 'A', lastName: 'B', department: 'sales' },
        metadata: { tenantId: tenant.tenantId, actor: 'spec', now: new Date().toISOString() },
      },
    );
    expect((await sqlAt(db.url, `select from es_events`)).length).toBeGreaterThan(0);

    const granted = await runOps(ownerUrl, 'analysts', 'grant', tenant.slug);
    expect(granted.code, granted.stderr).toBe(0);
    const login = `analyst_${tenant.slug.replaceAll('-', '_')}`;
    const analyst = new pg.Client({ connectionString: connectionString(db.url, login, undefined) });
    analyst.on('error', () => undefined);
    await analyst.connect();
    await analyst.query(`select lo_from_bytea(0, 'kept')`); // still PUBLIC's: only a superuser could take it
    await analyst.query('set default_transaction_read_only = off');
    await analyst.query('begin');
    await analyst.query('create temporary table scratch (a int)');

    const revoked = await runOps(ownerUrl, 'analysts', 'revoke', tenant.slug);
    expect(revoked.code, `${revoked.stdout}${revoked.stderr}`).toBe(0);
    expect(revoked.stdout).toContain(`dropped analyst login ${login} of tenant ${tenant.slug}; 1 open sessions ended`);
    expect(await sqlAt(db.url, `select from pg_roles where rolname = $1`, [login])).toHaveLength(0);
    expect(await sqlAt(db.url, `select from pg_largeobject_metadata`)).toHaveLength(0);
    await analyst.end().catch(() => undefined);
  });
});
