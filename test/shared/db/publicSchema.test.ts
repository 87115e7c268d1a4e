import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { allMigrations } from '../../../services/migrations.ts';
import { migrate } from '../../../shared/db/migrate.ts';
import { createEmptyTestDatabase, sqlAt, type BareTestDatabase } from '../../support/database.ts';

/**
 * A cluster created before PostgreSQL 15 and upgraded keeps letting every role create objects in
 * the public schema. The migrations take that away from every role but the one migrating: the
 * analysts' logins (and the tenant role) create nothing there. Under an owner that is not a
 * superuser and does not own the schema, they change nothing and the owner keeps creating.
 */
const asUpgradedCluster = (db: BareTestDatabase) => sqlAt(db.url, 'grant create on schema public to public');

describe('on a database whose public schema every role may create in', () => {
  let db: BareTestDatabase;
  beforeAll(async () => {
    db = await createEmptyTestDatabase();
    await asUpgradedCluster(db);
  });
  afterAll(() => db?.drop());

  it("the migrations leave CREATE there to the migrating role only, not to analysts' logins", { timeout: 60_000 }, async () => {
    await migrate(db.url, allMigrations);
    const [can] = await sqlAt<{ analysts: boolean; tenant: boolean; owner: boolean }>(
      db.url,
      `select has_schema_privilege('eas_analysts', 'public', 'create') as analysts,
              has_schema_privilege('eas_tenant', 'public', 'create') as tenant,
              has_schema_privilege(current_user, 'public', 'create') as owner`,
    );
    expect(can).toEqual({ analysts: false, tenant: false, owner: true });
  });
});

describe('when the owner migrating is not a superuser and the schema is not its own', () => {
  let db: BareTestDatabase;
  let owner: string;
  let ownerUrl: string;
  beforeAll(async () => {
    db = await createEmptyTestDatabase();
    owner = `${db.name}_owner`;
    await sqlAt(db.url, `create role "${owner}" login createrole`);
    await sqlAt(db.url, `alter database "${db.name}" owner to "${owner}"`);
    await sqlAt(db.url, `alter schema public owner to postgres`); // as before PostgreSQL 15
    await asUpgradedCluster(db);
    const url = new URL(db.url);
    url.username = owner;
    ownerUrl = url.toString();
  });
  afterAll(async () => {
    await db?.drop();
    await sqlAt(db.url.replace(/\/[^/]*$/, '/postgres'), `drop role if exists "${owner}"`).catch(() => undefined);
  });

  it('the migrations apply and the owner still creates tables there', { timeout: 60_000 }, async () => {
    expect((await migrate(ownerUrl, allMigrations)).length).toBeGreaterThan(0);
    await sqlAt(ownerUrl, 'create table public.still_mine (a int)');
    const [role] = await sqlAt<{ rolsuper: boolean }>(ownerUrl, 'select rolsuper from pg_roles where rolname = current_user');
    expect(role).toEqual({ rolsuper: false });
  });
});
