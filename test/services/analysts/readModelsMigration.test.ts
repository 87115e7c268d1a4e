import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { allMigrations } from '../../../services/migrations.ts';
import { employeesProjection } from '../../../projections/employees/employeesProjection.ts';
import { kpiBillingProjection } from '../../../projections/kpi/billingProjection.ts';
import { workforceProjection } from '../../../projections/workforce/workforceProjection.ts';
import { applyMigrations, loadMigrations, migrate } from '../../../shared/db/migrate.ts';
import { createDatabasePool, type DatabasePool } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import { createEmptyTestDatabase, sqlAt, type BareTestDatabase } from '../../support/database.ts';

/**
 * A deployment whose read models were built before analysts had logins: their tables lack the
 * analysts' grant and policies, which the projections' DDL adds only to tables built from now on.
 * The migration that comes with the logins adds them to the tables it finds, and leaves alone
 * those that have them already.
 */
let db: BareTestDatabase;
let pool: DatabasePool;

/** The tables the analysts' group may read, each with whether its restrictive analyst policy is there. */
const analystTables = () =>
  sqlAt<{ name: string; walled: boolean }>(
    db.url,
    `select c.relname as name,
            exists (select from pg_policies p where p.tablename = c.relname and p.permissive = 'RESTRICTIVE' and 'eas_analysts' = any(p.roles)) as walled
     from pg_class c where c.relnamespace = current_schema()::regnamespace and c.relkind = 'r' and has_table_privilege('eas_analysts', c.oid, 'select')`,
  );

beforeAll(async () => {
  db = await createEmptyTestDatabase();
  await applyMigrations(
    db.url,
    loadMigrations(allMigrations).filter((m) => !m.id.startsWith('analysts/')),
  );
  pool = await createDatabasePool(db.url);
  const store = createPostgresEventStore(pool);
  await replayProjection(pool, store, employeesProjection);
  await replayProjection(pool, store, kpiBillingProjection);
  await replayProjection(pool, store, workforceProjection);
  await store.close();
  // The employees and workforce tables as the DDL before analysts built them; the billing ones keep
  // what they have, and so do the workforce totals, which came later and were always built with it.
  const before = ['employee_versions', 'workforce_day_counts', 'workforce_month_counts'];
  for (const table of [...Object.keys(employeesProjection.tables), ...before]) {
    const policies = await sqlAt<{ name: string }>(
      db.url,
      `select policyname as name from pg_policies where tablename = $1 and 'eas_analysts' = any(roles)`,
      [table],
    );
    for (const { name } of policies) await sqlAt(db.url, `drop policy "${name}" on "${table}"`);
    await sqlAt(db.url, `revoke select on "${table}" from eas_analysts`);
  }
}, 120_000);

afterAll(async () => {
  await pool?.end();
  await db?.drop();
});

describe('when the read models were built before analysts had logins', () => {
  it('the migration grants them to analysts behind the restrictive policy, once', async () => {
    expect((await analystTables()).map((t) => t.name)).not.toContain('employees');
    expect((await analystTables()).map((t) => t.name)).not.toContain('employee_versions');
    expect(await migrate(db.url, allMigrations)).toEqual(expect.arrayContaining(['analysts/001-read-models-for-analysts']));
    const tables = await analystTables();
    expect(tables.map((t) => t.name)).toEqual(
      expect.arrayContaining([
        ...Object.keys(employeesProjection.tables),
        ...Object.keys(workforceProjection.tables),
        'kpi_subscriptions',
        'kpi_usage_days',
      ]),
    );
    expect(tables.filter((t) => !t.walled)).toEqual([]);
    const [policies] = await sqlAt<{ n: number }>(
      db.url,
      `select count(*)::int as n from pg_policies where tablename = 'kpi_subscriptions' and 'eas_analysts' = any(roles)`,
    );
    expect(policies?.n).toBe(2);
  });
});
