import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';

/**
 * A migration is a `.sql` file owned by the capability that needs it (event store, each
 * projection, auth, ...), written once and never edited: a later version of a function is a new
 * file that repeats its body. Applied in order, once, under an advisory lock so that several
 * processes starting together do not race. Each applied file's SHA-256 is recorded, and start-up
 * refuses to go on when an applied file changed: a deployed database and a fresh one would no
 * longer hold the same schema.
 *
 * File convention: `<number>-<what it does>.sql`, applied in the order of the numbers; a file
 * runs whole, in one transaction. A file whose first line is
 * `-- migrate: no-transaction` (`create index concurrently`, which builds an index without
 * blocking writes, cannot run in a transaction) runs statement by statement instead, each ending
 * with `;` at the end of a line (no `;` at a line's end inside a statement or a comment); it
 * counts as applied once they all succeed. One that fails leaves the ones before it done, and the
 * next start runs them all again: each must be safe to run twice (`if exists`, `if not exists`).
 *
 * DDL cannot be expressed with bound values, so this runner talks to `pg` directly instead of
 * going through slonik's tagged templates (where it would need `sql.unsafe`).
 */
export type Migration = {
  /** `<prefix>/<file name without .sql>`: what `schema_migrations` records; never changes. */
  readonly id: string;
  /** The folder's prefix, and the number the file name starts with (its place in the folder). */
  readonly prefix: string;
  readonly number: number;
  readonly file: string;
  readonly sql: string;
  readonly sha256: string;
  /** The statements to run one by one outside a transaction, or undefined: the whole file in one. */
  readonly outsideTransaction: readonly string[] | undefined;
};

/** A folder of migration files; they apply in file-name order, their ids under `prefix`. */
export type MigrationFolder = { readonly prefix: string; readonly folder: URL };

const NO_TRANSACTION = '-- migrate: no-transaction';

/** The statements of a no-transaction file: split after each line that ends with `;`. */
function statementsOf(text: string): string[] {
  return text
    .split(/;[ \t]*(?:\r?\n|$)/)
    .map((s) => s.trim())
    .filter((s) => s.split('\n').some((line) => line.trim() !== '' && !line.trim().startsWith('--')));
}

/** The number a migration's name starts with (`015-…` → 15); NaN when it has none. */
const numberOf = (name: string) => Number(/^(\d+)-/.exec(name)?.[1] ?? NaN);

/** Any dollar quote, `$$` or `$tag$`: the body of a function or a `do` block. */
const DOLLAR_QUOTE = /\$([A-Za-z_][A-Za-z0-9_]*)?\$/;

export function migrationFromFile(prefix: string, file: string): Migration {
  const name = basename(file, '.sql');
  const id = `${prefix}/${name}`;
  const number = numberOf(name);
  if (!Number.isSafeInteger(number)) throw new Error(`Migration file ${file} must be named <number>-<what it does>.sql`);
  const sql = readFileSync(file, 'utf8');
  const sha256 = createHash('sha256').update(sql).digest('hex');
  const outsideTransaction = sql.startsWith(NO_TRANSACTION) ? statementsOf(sql) : undefined;
  // Splitting on `;` cuts a function body or a `do` block apart, which would only fail (or, worse,
  // half-run) at deploy time: refuse such a file when it is read.
  if (outsideTransaction?.some((statement) => DOLLAR_QUOTE.test(statement))) {
    throw new Error(
      `Migration ${id} (${file}) runs outside a transaction, so it is split on ';', but a statement holds a dollar-quoted body: move it to a file of its own that runs in a transaction`,
    );
  }
  return { id, prefix, number, file, sql, sha256, outsideTransaction };
}

/**
 * Every migration of `folders`, folder by folder in the given order, each in the order of the
 * numbers its file names start with. A number is used once per folder: two files with one number
 * (two branches that both took the next one) would leave their order to the rest of the name.
 */
export function loadMigrations(folders: readonly MigrationFolder[]): Migration[] {
  return folders.flatMap(({ prefix, folder }) => {
    const dir = fileURLToPath(folder);
    const migrations = readdirSync(dir)
      .filter((name) => name.endsWith('.sql'))
      .map((name) => migrationFromFile(prefix, join(dir, name)))
      .sort((a, b) => a.number - b.number);
    for (const [i, m] of migrations.entries()) {
      const previous = migrations[i - 1];
      if (previous?.number === m.number)
        throw new Error(`Migrations ${previous.file} and ${m.file} share the number ${m.number}: renumber the one not applied yet`);
    }
    return migrations;
  });
}

const LOCK_KEY = 7_412_019; // arbitrary, fixed: "the migration lock" of this service
/** How often a process that finds the migration lock taken tries again. */
const LOCK_RETRY_MS = 100;

/** Applies the migrations of `folders` not applied yet; resolves with their ids. */
export async function migrate(databaseUrl: string, folders: readonly MigrationFolder[]): Promise<string[]> {
  return applyMigrations(databaseUrl, loadMigrations(folders));
}

export async function applyMigrations(databaseUrl: string, migrations: readonly Migration[]): Promise<string[]> {
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
    await client.query('alter table schema_migrations add column if not exists sha256 text');
    const { rows } = await client.query<{ id: string; sha256: string | null }>('select id, sha256 from schema_migrations');
    const done = new Map(rows.map((r) => [r.id, r.sha256]));
    await checkApplied(client, migrations, done);
    for (const migration of migrations) {
      if (done.has(migration.id)) continue;
      const outside = migration.outsideTransaction;
      try {
        if (!outside) await client.query('begin');
        for (const statement of outside ?? [migration.sql]) await client.query(statement);
        await client.query('insert into schema_migrations (id, sha256) values ($1, $2)', [migration.id, migration.sha256]);
        if (!outside) await client.query('commit');
      } catch (error) {
        // A rollback that fails (the connection is gone: PostgreSQL rolls back by itself) must not
        // take the place of the error that made it, nor lose the migration's id.
        if (!outside) await client.query('rollback').catch(() => undefined);
        const again = outside ? ' (it runs again, whole, on the next start)' : '';
        throw new Error(`Migration ${migration.id} failed${again} (${migration.file}): ${(error as Error).message}`, { cause: error });
      }
      applied.push(migration.id);
    }
  } finally {
    await client.query('select pg_advisory_unlock($1)', [LOCK_KEY]).catch(() => undefined);
    await client.end();
  }
  return applied;
}

/**
 * Refuses to go on, before anything is applied, when the files no longer describe what the
 * database went through:
 * - an applied migration's file no longer hashes as recorded (it was edited);
 * - an applied id of a folder has no file, yet sorts before that folder's last file (the file was
 *   renamed or deleted: under a new name it would run a second time);
 * - a file not applied yet sorts before one that was (it would run out of order, after
 *   migrations written later than it).
 * An applied id past a folder's last file is a newer release's, met while old and new processes
 * run side by side: it is left alone. A row recorded before hashes were (null) adopts the file's
 * hash: nothing else tells what that file held then.
 */
async function checkApplied(client: pg.Client, migrations: readonly Migration[], done: ReadonlyMap<string, string | null>): Promise<void> {
  checkSequence(migrations, done);
  for (const migration of migrations) {
    const recorded = done.get(migration.id);
    if (recorded === undefined) continue;
    if (recorded === null) {
      await client.query('update schema_migrations set sha256 = $2 where id = $1 and sha256 is null', [migration.id, migration.sha256]);
    } else if (recorded !== migration.sha256) {
      throw new Error(
        `Migration ${migration.id} was applied from a file that has changed since: ${migration.file} ` +
          `hashes to ${migration.sha256}, the database recorded ${recorded}. Applied migrations are frozen: ` +
          'restore the file and put the change in a new migration file.',
      );
    }
  }
}

function checkSequence(migrations: readonly Migration[], done: ReadonlyMap<string, string | null>): void {
  const byPrefix = new Map<string, Migration[]>();
  for (const migration of migrations) byPrefix.set(migration.prefix, [...(byPrefix.get(migration.prefix) ?? []), migration]);
  for (const [prefix, files] of byPrefix) {
    const known = new Set(files.map((m) => m.id));
    const last = Math.max(...files.map((m) => m.number));
    const applied = [...done.keys()].filter((id) => id.startsWith(`${prefix}/`) && !id.slice(prefix.length + 1).includes('/'));
    // An unknown applied id numbered past the last file is a newer release's; one at or below it
    // was a file of ours that is gone or renamed (under its new name it would run again).
    const missing = applied.find((id) => !known.has(id) && !(numberOf(id.slice(prefix.length + 1)) > last));
    if (missing) {
      throw new Error(
        `Migration ${missing} is recorded as applied, but no file ${missing.slice(prefix.length + 1)}.sql is among ${prefix}'s migrations ` +
          '(renamed or deleted?). Applied migrations are frozen: restore the file under its name.',
      );
    }
    const newestApplied = files.filter((m) => done.has(m.id)).at(-1);
    const early = newestApplied && files.find((m) => !done.has(m.id) && m.number < newestApplied.number);
    if (newestApplied && early) {
      throw new Error(
        `Migration ${early.id} (${early.file}) is not applied, but comes before ${newestApplied.id}, which is: it would run out of order. ` +
          'Give it a number after every applied migration of its folder.',
      );
    }
  }
}
