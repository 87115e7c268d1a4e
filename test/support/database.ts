import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';
import { createPostgresEventStore } from '../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../shared/event-store/port.ts';
import { createDatabasePool, type DatabasePool } from '../../shared/db/pool.ts';

/**
 * A fresh, fully migrated database for one test file, cloned from the template that the
 * global setup prepared. Real PostgreSQL; dropped by `drop()` (and by the global teardown).
 */
export type TestDatabase = { readonly url: string; readonly name: string; readonly pool: DatabasePool; drop(): Promise<void> };

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run the tests through vitest (npm test), whose global setup provides it`);
  return value;
}

/**
 * One statement on a connection of its own, opened and closed around it: for tests that look at a
 * database from outside the code under test (catalogs, rows written by older code, migrations).
 */
export async function sqlAt<T extends pg.QueryResultRow>(databaseUrl: string, text: string, values: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    return (await client.query<T>(text, values)).rows;
  } finally {
    await client.end();
  }
}

/** Whether a statement whose text matches `like` (SQL LIKE) waits for a lock in PostgreSQL now; for `waitFor`. */
export async function waitsForLock(databaseUrl: string, like: string): Promise<boolean> {
  const rows = await sqlAt<{ n: string }>(
    databaseUrl,
    `select count(*) as n from pg_stat_activity where wait_event_type = 'Lock' and query like $1`,
    [like],
  );
  return Number(rows[0]?.n) > 0;
}

/** A database of this test run (the global teardown drops what a test leaves): its URL, its name, how to drop it. */
export type BareTestDatabase = Omit<TestDatabase, 'pool'>;

/** A new database of this test run, cloned from `template` (PostgreSQL's default: empty). */
async function newDatabase(template?: string): Promise<BareTestDatabase> {
  const adminUrl = required('TEST_PG_ADMIN_URL');
  const name = `t_${required('TEST_RUN_ID')}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        await admin.query(`create database "${name}"${template ? ` template "${template}"` : ''}`);
        break;
      } catch (error) {
        // Another file cloning the same template at this instant: try again shortly.
        if (attempt >= 20 || !/being accessed by other users/.test((error as Error).message)) throw error;
        await new Promise((r) => setTimeout(r, 50 + Math.random() * 100));
      }
    }
  } finally {
    await admin.end();
  }
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    name,
    async drop() {
      const client = new pg.Client({ connectionString: adminUrl });
      await client.connect();
      await client.query(`drop database if exists "${name}" with (force)`).catch(() => undefined);
      await client.end();
    },
  };
}

export async function createTestDatabase(): Promise<TestDatabase> {
  const database = await newDatabase(required('TEST_PG_TEMPLATE'));
  const pool = await createDatabasePool(database.url, { maximumPoolSize: 20 });
  return {
    ...database,
    pool,
    async drop() {
      await pool.end();
      await database.drop();
    },
  };
}

/** A new, empty database of this test run, with no migration applied (for migration tests). */
export const createEmptyTestDatabase = (): Promise<BareTestDatabase> => newDatabase();

/**
 * A fresh database and a PostgreSQL event store on it for the enclosing `describe` (registers
 * its own beforeAll/afterAll). Read `db` and `store` inside tests and hooks, not at collection.
 */
export function useTestEventStore(): { readonly db: TestDatabase; readonly store: EventStore } {
  let db: TestDatabase | undefined;
  let store: EventStore | undefined;
  beforeAll(async () => {
    db = await createTestDatabase();
    store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  });
  afterAll(async () => {
    await store?.close();
    await db?.drop();
  });
  const ready = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('useTestEventStore: used before its beforeAll ran');
    return value;
  };
  return {
    get db() {
      return ready(db);
    },
    get store() {
      return ready(store);
    },
  };
}
