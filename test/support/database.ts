import { randomBytes } from 'node:crypto';
import pg from 'pg';
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

export async function createTestDatabase(): Promise<TestDatabase> {
  const adminUrl = required('TEST_PG_ADMIN_URL');
  const template = required('TEST_PG_TEMPLATE');
  const name = `t_${required('TEST_RUN_ID')}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        await admin.query(`create database "${name}" template "${template}"`);
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
  const pool = await createDatabasePool(url.toString(), { maximumPoolSize: 20 });
  return {
    url: url.toString(),
    name,
    pool,
    async drop() {
      await pool.end();
      const client = new pg.Client({ connectionString: adminUrl });
      await client.connect();
      await client.query(`drop database if exists "${name}" with (force)`).catch(() => undefined);
      await client.end();
    },
  };
}
