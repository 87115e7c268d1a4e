import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { migrate, type MigrationFolder } from '../../../shared/db/migrate.ts';
import { createEmptyTestDatabase, sqlAt, waitsForLock, type BareTestDatabase } from '../../support/database.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * The migration runner (real PostgreSQL) on migration files in a temporary folder: files that
 * must run outside a transaction (`create index concurrently`), with several processes starting
 * together, and after a build that failed halfway; a migration whose connection is lost; and an
 * applied migration whose file changed.
 */
const TABLE = 'create table t (k int not null);\n';
const UNIQUE_INDEX = [
  '-- migrate: no-transaction',
  '-- A unique index, built without blocking writes.',
  'drop index concurrently if exists t_k_key;',
  'create unique index concurrently t_k_key on t (k);',
  '',
].join('\n');

let dir: string;
/** The temporary folder with `files` (name → content) written into it, as the runner reads it. */
const folderWith = (files: Record<string, string>): MigrationFolder[] => {
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return [{ prefix: 'test', folder: pathToFileURL(`${dir}/`) }];
};
const table = () => folderWith({ '001-table.sql': TABLE });
const tableAndIndex = () => folderWith({ '001-table.sql': TABLE, '002-unique-index.sql': UNIQUE_INDEX });

let db: BareTestDatabase;

const query = <T extends pg.QueryResultRow>(text: string, values: unknown[] = []) => sqlAt<T>(db.url, text, values);

const indexState = () =>
  query<{ valid: boolean; unique: boolean }>(
    `select indisvalid as valid, indisunique as unique from pg_index where indexrelid = to_regclass('t_k_key')`,
  );
const recorded = async () =>
  (await query<{ id: string }>(`select id from schema_migrations where id like 'test/%' order by id`)).map((r) => r.id);

beforeEach(async () => {
  db = await createEmptyTestDatabase();
  dir = mkdtempSync(join(tmpdir(), 'migrations-'));
});

afterEach(async () => {
  await db.drop();
  rmSync(dir, { recursive: true, force: true });
});

describe('migrate: statements that run outside a transaction', () => {
  it('builds the index concurrently and records the migration once', async () => {
    expect(await migrate(db.url, tableAndIndex())).toEqual(['test/001-table', 'test/002-unique-index']);
    expect(await indexState()).toEqual([{ valid: true, unique: true }]);
    expect(await migrate(db.url, tableAndIndex())).toEqual([]);
    expect(await recorded()).toEqual(['test/001-table', 'test/002-unique-index']);
  });

  it('does not deadlock with a process that starts while the build waits for older snapshots', async () => {
    await migrate(db.url, table());
    // A transaction writing to the table: the concurrent build waits for it before it starts.
    const writer = new pg.Client({ connectionString: db.url });
    await writer.connect();
    try {
      await writer.query('begin');
      await writer.query('insert into t values (1)');
      const first = migrate(db.url, tableAndIndex());
      await waitFor(() => waitsForLock(db.url, 'create unique index concurrently%'));
      // A second process starts meanwhile and waits for the migration lock. Had it waited inside
      // pg_advisory_lock, its statement's snapshot would hold up the build, which holds the lock it
      // waits for: PostgreSQL would cancel one of the two as a deadlock after a second.
      const second = migrate(db.url, tableAndIndex());
      // It has found the lock taken once it polls for it (its last statement, between tries).
      const polling = `select count(*)::int as n from pg_stat_activity where datname = current_database() and query like 'select pg_try_advisory_lock%'`;
      await waitFor(async () => ((await sqlAt<{ n: number }>(db.url, polling))[0]?.n ?? 0) > 0);
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
    await migrate(db.url, table());
    await query('insert into t values (1), (1)');
    await expect(migrate(db.url, tableAndIndex())).rejects.toThrow(
      /test\/002-unique-index failed \(it runs again, whole, on the next start\).*could not create unique index/,
    );
    // The interrupted build leaves an invalid index behind, which the migration drops first.
    expect(await indexState()).toEqual([{ valid: false, unique: true }]);
    expect(await recorded()).toEqual(['test/001-table']);
    await query(`delete from t where ctid = (select max(ctid) from t)`);
    expect(await migrate(db.url, tableAndIndex())).toEqual(['test/002-unique-index']);
    expect(await indexState()).toEqual([{ valid: true, unique: true }]);
  });
});

describe('migrate: a connection lost during a migration', () => {
  it('fails with the migration id and the cause, records nothing, and the next start applies it', async () => {
    // The statement ends its own backend: the statement fails, and so would the rollback after it.
    const dies = folderWith({ '001-dies.sql': 'create table t (k int); select pg_terminate_backend(pg_backend_pid())' });
    await expect(migrate(db.url, dies)).rejects.toThrow(/^Migration test\/001-dies failed \(.*001-dies\.sql\): /);
    expect(await query(`select to_regclass('t') as t`)).toEqual([{ t: null }]);
    rmSync(join(dir, '001-dies.sql'));
    expect(await migrate(db.url, table())).toEqual(['test/001-table']);
    expect(await recorded()).toEqual(['test/001-table']);
  });
});

describe('migrate: an applied migration whose file changed', () => {
  const hashes = async () =>
    query<{ id: string; sha256: string | null }>(`select id, sha256 from schema_migrations where id like 'test/%' order by id`);

  it("records each file's SHA-256, and refuses to start, naming the file and both hashes, once one changed", async () => {
    await migrate(db.url, table());
    const [applied] = await hashes();
    expect(applied?.sha256).toMatch(/^[0-9a-f]{64}$/);
    const edited = folderWith({ '001-table.sql': 'create table t (k bigint not null);\n', '002-unique-index.sql': UNIQUE_INDEX });
    const refusal = migrate(db.url, edited);
    await expect(refusal).rejects.toThrow(
      /^Migration test\/001-table was applied from a file that has changed since: .*\/001-table\.sql hashes to [0-9a-f]{64}, the database recorded [0-9a-f]{64}\. Applied migrations are frozen/,
    );
    await expect(refusal).rejects.toThrow(applied?.sha256 ?? 'no hash recorded');
    // Refused before anything else ran: the new file is not applied.
    expect(await recorded()).toEqual(['test/001-table']);
    expect(await indexState()).toEqual([]);
  });

  it("adopts the file's hash for a migration applied before hashes were recorded", async () => {
    await migrate(db.url, table());
    const [before] = await hashes();
    await query(`update schema_migrations set sha256 = null where id = 'test/001-table'`);
    expect(await migrate(db.url, table())).toEqual([]);
    expect(await hashes()).toEqual([before]);
  });
});

describe('migrate: files that no longer match the sequence the database went through', () => {
  const INDEX = 'create index t_k on t (k);\n';

  it('refuses an applied migration whose file was renamed, naming it, and applies nothing', async () => {
    await migrate(db.url, folderWith({ '001-table.sql': TABLE, '002-index.sql': INDEX }));
    rmSync(join(dir, '001-table.sql'));
    const renamed = folderWith({ '001-create-table.sql': TABLE });
    await expect(migrate(db.url, renamed)).rejects.toThrow(/^Migration test\/001-table is recorded as applied, but no file 001-table\.sql/);
    expect(await recorded()).toEqual(['test/001-table', 'test/002-index']);
  });

  it('refuses a new file that sorts before an applied one: it would run out of order', async () => {
    await migrate(db.url, folderWith({ '001-table.sql': TABLE, '003-index.sql': INDEX }));
    const late = folderWith({ '002-column.sql': 'alter table t add column v int;\n' });
    await expect(migrate(db.url, late)).rejects.toThrow(
      /^Migration test\/002-column \(.*\/002-column\.sql\) is not applied, but comes before test\/003-index/,
    );
    expect(await recorded()).toEqual(['test/001-table', 'test/003-index']);
  });

  it("leaves alone an applied migration past the folder's last file: a newer release's, beside an older process", async () => {
    await migrate(db.url, folderWith({ '001-table.sql': TABLE, '002-index.sql': INDEX }));
    rmSync(join(dir, '002-index.sql'));
    expect(await migrate(db.url, table())).toEqual([]);
  });

  it("refuses a renamed last file too: the old id shares the new file's number", async () => {
    await migrate(db.url, folderWith({ '001-table.sql': TABLE, '002-index.sql': INDEX }));
    rmSync(join(dir, '002-index.sql'));
    const renamed = folderWith({ '002-an-index.sql': INDEX });
    await expect(migrate(db.url, renamed)).rejects.toThrow(/^Migration test\/002-index is recorded as applied, but no file 002-index\.sql/);
    expect(await recorded()).toEqual(['test/001-table', 'test/002-index']);
  });

  it('refuses, when it reads the files, two files with one number', async () => {
    const twice = folderWith({ '001-table.sql': TABLE, '002-index.sql': INDEX, '002-column.sql': 'alter table t add column v int;\n' });
    await expect(migrate(db.url, twice)).rejects.toThrow(/share the number 2/);
  });

  it.each(['$$', '$fn$'])('refuses, when it reads the file, a no-transaction migration with a %s body', async (quote) => {
    const body = folderWith({
      '001-function.sql': `-- migrate: no-transaction\ncreate function f() returns int language sql as ${quote} select 1; ${quote};\n`,
    });
    await expect(migrate(db.url, body)).rejects.toThrow(/^Migration test\/001-function .* holds a dollar-quoted body/);
  });
});
