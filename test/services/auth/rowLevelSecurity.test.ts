import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql, withTenant, type DatabaseTransactionConnection } from '../../../shared/db/pool.ts';
import { createSessions } from '../../../services/auth/sessions.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { createTestAuth, createTestUser, provisionTenant, type TestTenant } from '../../support/auth.ts';

/**
 * Bypasses the API: queries the tenant-scoped tables directly, as the tenant role, with
 * another tenant's context and with none. Row-level security must hide every row.
 */
const TENANT_SCOPED_TABLES = ['roles', 'users', 'refresh_tokens'] as const;

let db: TestDatabase;
let auth: AuthDeps;
let a: TestTenant;
let b: TestTenant;

const countRow = z.object({ n: z.number() });
const count = (tx: DatabaseTransactionConnection, table: string, tenantId?: string) =>
  tx.oneFirst(
    sql.type(
      countRow,
    )`select count(*)::int as n from ${sql.identifier([table])} ${tenantId ? sql.fragment`where tenant_id = ${tenantId}` : sql.fragment``}`,
  );

beforeAll(async () => {
  db = await createTestDatabase();
  auth = await createTestAuth(db.pool);
  [a, b] = await Promise.all([provisionTenant(db.pool), provisionTenant(db.pool)]);
  // Give tenant A a row in every table (a user and a refresh token through a real login).
  const user = await createTestUser(db.pool, a, 'admin');
  const sessions = createSessions({ ...auth, now: Date.now });
  await sessions.login(a.slug, user.email, user.password);
});
afterAll(async () => {
  await auth?.close();
  await db?.drop();
});

describe('when the tables are queried directly', () => {
  it.each(TENANT_SCOPED_TABLES)("%s: the owning tenant's context sees its rows", async (table) => {
    expect(await withTenant(db.pool, a.tenantId, (tx) => count(tx, table, a.tenantId))).toBeGreaterThan(0);
  });

  it.each(TENANT_SCOPED_TABLES)("%s: another tenant's context sees zero of them, even naming them", async (table) => {
    expect(await withTenant(db.pool, b.tenantId, (tx) => count(tx, table, a.tenantId))).toBe(0);
    const visible = await withTenant(db.pool, b.tenantId, (tx) =>
      tx.anyFirst(sql.type(z.object({ tenant_id: z.string() }))`select tenant_id from ${sql.identifier([table])}`),
    );
    expect(visible.every((id) => id === b.tenantId)).toBe(true);
  });

  it.each(TENANT_SCOPED_TABLES)('%s: the tenant role without a tenant context sees zero rows', async (table) => {
    const n = await db.pool.transaction(async (tx) => {
      await tx.query(sql.type(z.object({}))`select set_config('role', 'eas_tenant', true)`);
      return count(tx, table);
    });
    expect(n).toBe(0);
  });

  it.each(TENANT_SCOPED_TABLES)('%s: row-level security is enabled and forced', async (table) => {
    const flags = await db.pool.one(sql.type(z.object({ enabled: z.boolean(), forced: z.boolean() }))`
      select relrowsecurity as enabled, relforcerowsecurity as forced from pg_class where relname = ${table} and relkind = 'r'
    `);
    expect(flags).toEqual({ enabled: true, forced: true });
  });

  it("cannot write a row into another tenant's scope", async () => {
    const roleOfA = await withTenant(db.pool, a.tenantId, (tx) =>
      tx.oneFirst(sql.type(z.object({ id: z.string() }))`select id from roles where name = 'employee'`),
    );
    await expect(
      withTenant(db.pool, b.tenantId, (tx) =>
        tx.query(
          sql.type(z.object({}))`insert into users (tenant_id, email, role_id) values (${a.tenantId}, 'intruder@example.test', ${roleOfA})`,
        ),
      ),
    ).rejects.toThrow(/row-level security/);
  });
});
