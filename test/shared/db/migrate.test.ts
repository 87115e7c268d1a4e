import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { migrate, type Migration } from '../../../shared/db/migrate.ts';
import { createEmptyTestDatabase, sqlAt, waitsForLock, type BareTestDatabase } from '../../support/database.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * The migration runner (real PostgreSQL): migrations that must run outside a transaction
 * (`create index concurrently`, issue 11's event-store/013), with several processes starting
 * together, and after a build that failed halfway; and a migration whose connection is lost.
 */
const table: Migration = { id: 'test/001-table', sql: 'create table t (k int not null)' };
const uniqueIndex: Migration = {
  id: 'test/002-unique-index',
  concurrently: ['drop index concurrently if exists t_k_key', 'create unique index concurrently t_k_key on t (k)'],
};

let db: BareTestDatabase;

const query = <T extends pg.QueryResultRow>(text: string, values: unknown[] = []) => sqlAt<T>(db.url, text, values);

const indexState = () => query<{ valid: boolean; unique: boolean }>(`select indisvalid as valid, indisunique as unique from pg_index where indexrelid = to_regclass('t_k_key')`);
const recorded = async () => (await query<{ id: string }>(`select id from schema_migrations where id like 'test/%' order by id`)).map((r) => r.id);

beforeEach(async () => {
  db = await createEmptyTestDatabase();
});

afterEach(async () => {
  await db.drop();
});

describe('migrate: statements that run outside a transaction', () => {
  it('builds the index concurrently and records the migration once', async () => {
    expect(await migrate(db.url, [table, uniqueIndex])).toEqual(['test/001-table', 'test/002-unique-index']);
    expect(await indexState()).toEqual([{ valid: true, unique: true }]);
    expect(await migrate(db.url, [table, uniqueIndex])).toEqual([]);
    expect(await recorded()).toEqual(['test/001-table', 'test/002-unique-index']);
  });

  it('does not deadlock with a process that starts while the build waits for older snapshots', async () => {
    await migrate(db.url, [table]);
    // A transaction writing to the table: the concurrent build waits for it before it starts.
    const writer = new pg.Client({ connectionString: db.url });
    await writer.connect();
    try {
      await writer.query('begin');
      await writer.query('insert into t values (1)');
      const first = migrate(db.url, [table, uniqueIndex]);
      await waitFor(() => waitsForLock(db.url, 'create unique index concurrently%'));
      // A second process starts meanwhile and waits for the migration lock. Had it waited inside
      // pg_advisory_lock, its statement's snapshot would hold up the build, which holds the lock it
      // waits for: PostgreSQL would cancel one of the two as a deadlock after a second.
      const second = migrate(db.url, [table, uniqueIndex]);
      await new Promise((resolve) => setTimeout(resolve, 300));
      await writer.query('commit');
      const [applied, appliedBySecond] = await Promise.all([first, second]);
      expect(applied).toEqual(['test/002-unique-index']);
      expect(appliedBySecond).toEqual([]);
    } finally {
      await writer.end().catch(() => undefined);
    }
    expect(await indexState()).toEqual([{ valid: true, unique: true }]);
  });

  it('after a build that failed, records nothing, and the next start builds the index again', async () => {
    await migrate(db.url, [table]);
    await query('insert into t values (1), (1)');
    await expect(migrate(db.url, [table, uniqueIndex])).rejects.toThrow(/test\/002-unique-index failed \(it runs again, whole, on the next start\).*could not create unique index/);
    // The interrupted build leaves an invalid index behind, which the migration drops first.
    expect(await indexState()).toEqual([{ valid: false, unique: true }]);
    expect(await recorded()).toEqual(['test/001-table']);
    await query(`delete from t where ctid = (select max(ctid) from t)`);
    expect(await migrate(db.url, [table, uniqueIndex])).toEqual(['test/002-unique-index']);
    expect(await indexState()).toEqual([{ valid: true, unique: true }]);
  });
});

describe('migrate: a connection lost during a migration', () => {
  it('fails with the migration id and the cause, records nothing, and the next start applies it', async () => {
    // The statement ends its own backend: the statement fails, and so would the rollback after it.
    const dies: Migration = { id: 'test/001-dies', sql: 'create table t (k int); select pg_terminate_backend(pg_backend_pid())' };
    await expect(migrate(db.url, [dies])).rejects.toThrow(/^Migration test\/001-dies failed: /);
    expect(await query(`select to_regclass('t') as t`)).toEqual([{ t: null }]);
    expect(await migrate(db.url, [table])).toEqual(['test/001-table']);
    expect(await recorded()).toEqual(['test/001-table']);
  });
});
