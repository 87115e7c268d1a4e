import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectionString } from '../../../services/ops/analysts.ts';
import { provisionTenant } from '../../support/auth.ts';
import { createTestDatabase, sqlAt, type TestDatabase } from '../../support/database.ts';
import { runOps } from '../../support/processes.ts';

/**
 * `ops analysts revoke` against what a login can leave behind to keep its role alive: objects it
 * owns (large objects) and a session still open with a temporary table in a transaction. Either way the login ends without role, binding or session.
 */
let db: TestDatabase;
const created: string[] = [];

async function grantedLogin(): Promise<{ slug: string; login: string; url: string }> {
  const tenant = await provisionTenant(db.pool);
  const result = await runOps(db.url, 'analysts', 'grant', tenant.slug);
  expect(result.code, result.stderr).toBe(0);
  const url = result.stdout.split('\n').find((l) => l.startsWith('postgres'));
  if (!url) throw new Error(`no connection string in: ${result.stdout}`);
  const login = decodeURIComponent(new URL(url).username);
  created.push(login);
  return { slug: tenant.slug, login, url };
}

async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined); // a terminated session reports here too
  await client.connect();
  return client;
}

async function expectFullyRevoked(slug: string, login: string): Promise<void> {
  const revoked = await runOps(db.url, 'analysts', 'revoke', slug);
  expect(revoked.code, `${revoked.stdout}${revoked.stderr}`).toBe(0);
  expect(revoked.stdout).toContain(`dropped analyst login ${login} of tenant ${slug}`);
  expect(await sqlAt(db.url, `select from pg_roles where rolname = $1`, [login])).toHaveLength(0);
  expect(await sqlAt(db.url, `select from analyst_logins where role_name = $1`, [login])).toHaveLength(0);
  expect(await sqlAt(db.url, `select from analyst_logins_revoked where role_name = $1`, [login])).toHaveLength(0);
  await expect(connect(connectionString(db.url, login, undefined))).rejects.toThrow(/does not exist/);
}

beforeAll(async () => {
  db = await createTestDatabase();
}, 120_000);

afterAll(async () => {
  for (const login of created) {
    await sqlAt(db.url, `drop owned by "${login}"`).catch(() => undefined);
    await sqlAt(db.url, `drop role if exists "${login}"`).catch(() => undefined);
  }
  await db?.drop();
});

describe('when an analyst login is revoked', () => {
  it('is dropped though it owns a large object, which is dropped with it', { timeout: 60_000 }, async () => {
    const { slug, login } = await grantedLogin();
    // Logins may no longer create large objects; one made where they still may (a database whose
    // owner is not a superuser) is given to it here.
    const [{ oid } = { oid: 0 }] = await sqlAt<{ oid: number }>(db.url, `select lo_from_bytea(0, 'kept')::int as oid`);
    await sqlAt(db.url, `alter large object ${oid} owner to "${login}"`);
    expect(await sqlAt(db.url, `select from pg_largeobject_metadata where oid = $1 and lomowner = $2::regrole`, [oid, login])).toHaveLength(
      1,
    );

    await expectFullyRevoked(slug, login);
    expect(await sqlAt(db.url, `select from pg_largeobject_metadata where oid = $1`, [oid])).toHaveLength(0);
  });

  it('is dropped though a session of it holds a temporary table in an open transaction, which is ended', { timeout: 60_000 }, async () => {
    const { slug, login, url } = await grantedLogin();
    const analyst = await connect(url);
    await analyst.query('set default_transaction_read_only = off'); // a default the login may change
    await analyst.query('begin');
    await analyst.query('create temporary table scratch (a int)');

    await expectFullyRevoked(slug, login);
    await expect(analyst.query('select a from scratch')).rejects.toThrow();
  });

  it(
    'cuts its access first: a login whose role cannot be dropped reads nothing, cannot log in, and a later revoke finishes',
    {
      timeout: 60_000,
    },
    async () => {
      const { slug, login, url } = await grantedLogin();
      // A table the login owns, locked by another session: dropping it waits, then gives up.
      await sqlAt(db.url, `create table "${login}_owned" (a int)`);
      await sqlAt(db.url, `alter table "${login}_owned" owner to "${login}"`);
      const blocker = await connect(db.url);
      await blocker.query('begin');
      await blocker.query(`lock table "${login}_owned" in access share mode`);

      const first = await runOps(db.url, 'analysts', 'revoke', slug);
      expect(first.code).toBe(1);
      expect(first.stdout).toContain(`cut the access of analyst login ${login} of tenant ${slug}`);
      const [role] = await sqlAt<{ rolcanlogin: boolean; member: boolean }>(
        db.url,
        `select rolcanlogin, pg_has_role(rolname, 'eas_analysts', 'member') as member from pg_roles where rolname = $1`,
        [login],
      );
      expect(role).toEqual({ rolcanlogin: false, member: false });
      expect(await sqlAt(db.url, `select from analyst_logins where role_name = $1`, [login])).toHaveLength(0);
      await expect(connect(url)).rejects.toThrow(/not permitted to log in/);

      await blocker.query('rollback');
      await blocker.end();
      await expectFullyRevoked(slug, login);
    },
  );
});
