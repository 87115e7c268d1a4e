import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { allProjections } from '../../../services/projectors.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import { TENANT_ROLE } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { createTestDatabase, sqlAt, type TestDatabase } from '../../support/database.ts';

/**
 * Every tenant-scoped table, those of the migrations and those the projections build alike, read
 * by a session that set `app.tenant_id` and then reset it (the setting then reads as '', not
 * null), as the tenant role: zero rows, and no error. Each table holds a row, so that its policy
 * is evaluated at all.
 */
let db: TestDatabase;
let store: EventStore;
let tables: string[];

/** A value of each column type these tables use, for a row of any shape. */
const VALUES: Record<string, string> = {
  uuid: 'gen_random_uuid()',
  text: "'x'",
  varchar: "'x'",
  int2: '1',
  int4: '1',
  int8: '1',
  numeric: '1',
  float8: '1',
  bool: 'false',
  date: 'current_date',
  timestamptz: 'now()',
  jsonb: "'{}'",
  bytea: "'\\x00'",
  _text: "'{}'",
};

/** Writes one row into `table` as the superuser, its constraints aside (this database is thrown away). */
async function plantRow(table: string): Promise<void> {
  const columns = await sqlAt<{ name: string; type: string }>(
    db.url,
    `select column_name as name, udt_name as type from information_schema.columns
     where table_schema = 'public' and table_name = $1 and is_nullable = 'NO' and column_default is null and is_identity = 'NO' and is_generated = 'NEVER'`,
    [table],
  );
  const checks = await sqlAt<{ name: string }>(
    db.url,
    `select conname as name from pg_constraint where conrelid = $1::regclass and contype = 'c'`,
    [table],
  );
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    await client.query('begin');
    for (const { name } of checks) await client.query(`alter table "${table}" drop constraint "${name}"`);
    // Foreign keys are triggers, which a replica session does not fire.
    await client.query(`set local session_replication_role = replica`);
    const values = columns.map(({ name, type }) => {
      const value = VALUES[type];
      if (!value) throw new Error(`${table}.${name}: no test value for type ${type}`);
      return value;
    });
    await client.query(`insert into "${table}" (${columns.map((c) => `"${c.name}"`).join(', ')}) values (${values.join(', ')})`);
    await client.query('commit');
  } finally {
    await client.end();
  }
}

/** `select count(*)` from `table` in a session that set and reset `app.tenant_id`, as the tenant role. */
async function countAfterReset(table: string): Promise<number> {
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    await client.query(`set app.tenant_id = '${randomUUID()}'`);
    await client.query('reset app.tenant_id');
    await client.query(`set role ${TENANT_ROLE}`);
    const { rows } = await client.query<{ n: number }>(`select count(*)::int as n from "${table}"`);
    return rows[0]?.n ?? -1;
  } finally {
    await client.end();
  }
}

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool);
  // The read models' tables, as a projector's start builds them.
  for (const projection of allProjections) await replayProjection(db.pool, store, projection);
  tables = (
    await sqlAt<{ table: string }>(
      db.url,
      `select distinct tablename as table from pg_policies where qual like '%app.tenant_id%' order by 1`,
    )
  ).map((r) => r.table);
  for (const table of tables) await plantRow(table);
}, 60_000);

afterAll(async () => {
  await store?.close();
  await db?.drop();
});

describe('when a session set and then reset app.tenant_id', () => {
  it('finds the tenant-scoped tables of the migrations and of every read model', () => {
    expect(tables).toEqual(
      expect.arrayContaining([
        'roles',
        'users',
        'refresh_tokens',
        'kpi_usage_minutes',
        'kpi_usage_days',
        'webhook_endpoints',
        'webhook_deliveries',
      ]),
    );
    for (const model of ['employees', 'changes', 'billing'])
      expect(
        tables.some((t) => t.includes(model)),
        model,
      ).toBe(true);
  });

  it('reads zero rows of every one of them, and no error', async () => {
    const counts = Object.fromEntries(await Promise.all(tables.map(async (t) => [t, await countAfterReset(t)] as const)));
    expect(counts).toEqual(Object.fromEntries(tables.map((t) => [t, 0])));
  });

  it('would have failed with a bare ::uuid cast (the form these policies replaced)', async () => {
    await sqlAt(
      db.url,
      `create table rls_bare_cast (tenant_id uuid not null);
      alter table rls_bare_cast enable row level security;
      create policy rls_bare_cast_tenant on rls_bare_cast using (tenant_id = current_setting('app.tenant_id', true)::uuid);
      grant select on rls_bare_cast to ${TENANT_ROLE};
      insert into rls_bare_cast values (gen_random_uuid());`,
    );
    await expect(countAfterReset('rls_bare_cast')).rejects.toThrow(/invalid input syntax for type uuid/);
  });
});
