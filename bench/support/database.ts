import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { allMigrations } from '../../services/migrations.ts';
import { migrate } from '../../shared/db/migrate.ts';

/** A fresh, migrated database for one bench run, on DATABASE_URL's server (default: local PostgreSQL). */
export type BenchDatabase = { readonly url: string; readonly name: string; drop(): Promise<void> };

export const benchAdminUrl = () => process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

async function asAdmin(adminUrl: string, statement: string): Promise<void> {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(statement);
  } finally {
    await admin.end();
  }
}

export async function createBenchDatabase(prefix: string, adminUrl = benchAdminUrl()): Promise<BenchDatabase> {
  const name = `${prefix}_${randomBytes(4).toString('hex')}`;
  await asAdmin(adminUrl, `create database ${name}`);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  await migrate(url.toString(), allMigrations);
  return { url: url.toString(), name, drop: () => asAdmin(adminUrl, `drop database if exists ${name} with (force)`) };
}
