import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';

/**
 * A migration is plain DDL owned by the capability that needs it (event store, each
 * projection, auth, ...). Applied in order, once, under an advisory lock so that several
 * processes starting together do not race.
 *
 * DDL cannot be expressed with bound values, so this runner talks to `pg` directly instead of
 * going through slonik's tagged templates (where it would need `sql.unsafe`).
 */
export type Migration =
  | { readonly id: string; readonly sql: string }
  /**
   * Statements that cannot run in a transaction (`create index concurrently`, which builds an
   * index without blocking writes), each run on its own, in order; the migration counts as
   * applied once they all succeed. One that fails leaves the ones before it done, and the next
   * start runs them all again: each must be safe to run twice (`if exists`, `if not exists`).
   */
  | { readonly id: string; readonly concurrently: readonly string[] };

const LOCK_KEY = 7_412_019; // arbitrary, fixed: "the migration lock" of this service
/** How often a process that finds the migration lock taken tries again. */
const LOCK_RETRY_MS = 100;

export async function migrate(databaseUrl: string, migrations: readonly Migration[]): Promise<string[]> {
  const ids = new Set<string>();
  for (const m of migrations) {
    if (ids.has(m.id)) throw new Error(`Duplicate migration id ${m.id}`);
    ids.add(m.id);
  }
  const client = new pg.Client({ connectionString: databaseUrl });
  // A connection lost mid-migration fails the statement in flight, which reports it below; without
  // a listener, pg's 'error' event would also crash the process.
  client.on('error', () => undefined);
  await client.connect();
  const applied: string[] = [];
  try {
    // Polled, not waited for inside `pg_advisory_lock`: a statement waiting there holds a snapshot,
    // and `create index concurrently` in the process that holds the lock waits for every older
    // snapshot, which would be a deadlock (PostgreSQL would cancel one of the two).
    while (!(await client.query<{ locked: boolean }>('select pg_try_advisory_lock($1) as locked', [LOCK_KEY])).rows[0]?.locked) {
      await sleep(LOCK_RETRY_MS);
    }
    await client.query(`create table if not exists schema_migrations (
      id text primary key,
      applied_at timestamptz not null default now()
    )`);
    const { rows } = await client.query<{ id: string }>('select id from schema_migrations');
    const done = new Set(rows.map((r) => r.id));
    for (const migration of migrations) {
      if (done.has(migration.id)) continue;
      // Outside a transaction: each statement on its own (see `Migration`); else all in one.
      const outside = 'concurrently' in migration;
      try {
        if (!outside) await client.query('begin');
        for (const statement of outside ? migration.concurrently : [migration.sql]) await client.query(statement);
        await client.query('insert into schema_migrations (id) values ($1)', [migration.id]);
        if (!outside) await client.query('commit');
      } catch (error) {
        // A rollback that fails (the connection is gone: PostgreSQL rolls back by itself) must not
        // take the place of the error that made it, nor lose the migration's id.
        if (!outside) await client.query('rollback').catch(() => undefined);
        const again = outside ? ' (it runs again, whole, on the next start)' : '';
        throw new Error(`Migration ${migration.id} failed${again}: ${(error as Error).message}`, { cause: error });
      }
      applied.push(migration.id);
    }
  } finally {
    await client.query('select pg_advisory_unlock($1)', [LOCK_KEY]).catch(() => undefined);
    await client.end();
  }
  return applied;
}

/** The role tenant-scoped transactions switch to; created once per cluster. */
export const tenantRoleMigration: Migration = {
  id: 'db/001-tenant-role',
  sql: `
    do $$
    begin
      if not exists (select 1 from pg_roles where rolname = 'eas_tenant') then
        create role eas_tenant nologin;
      end if;
    exception when duplicate_object or unique_violation then null; -- created concurrently
    end $$;
    do $$
    begin
      execute format('grant eas_tenant to %I', current_user);
    exception when others then null; -- already granted, or we are a superuser
    end $$;
    grant usage on schema public to eas_tenant;
  `,
};

/**
 * DDL that makes `table` tenant-scoped: row-level security (forced, so even the owner is
 * filtered unless it is a superuser) keyed on `app.tenant_id`, which `withTenant` sets per
 * transaction, and the table granted to `eas_tenant`. Without the setting `nullif(...)` yields
 * null and every policy is false.
 */
export const tenantScopedDdl = (table: string) => `
  alter table ${table} enable row level security;
  alter table ${table} force row level security;
  create policy ${table}_tenant_isolation on ${table}
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)
    with check (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
  grant select, insert, update, delete on ${table} to eas_tenant;
`;
