import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql, withTenant, type DatabaseTransactionConnection } from '../../../shared/db/pool.ts';
import { hashRefreshToken, issueRefreshToken, revokeRefreshTokenFamily, rotateRefreshToken } from '../../../services/auth/refreshTokens.ts';
import { findRoleByName, listRoles } from '../../../services/auth/roles.ts';
import {
  createUser,
  disableUser,
  findLoginCredentials,
  findUserByEmail,
  findUserById,
  listUsers,
  setUserRole,
} from '../../../services/auth/users.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { createTestUser, provisionTenant, type TestTenant } from '../../support/auth.ts';

/**
 * The first wall (data is scoped to the tenant in every query): the auth stores name
 * the tenant in every query themselves, so they stay right on a connection that row-level
 * security does not filter. Here that connection is the test database's owner (a superuser),
 * outside `withTenant`: no `app.tenant_id`, no tenant role. Two tenants hold the same e-mail
 * address, and their refresh tokens even share a family id; asking as tenant A must find, change
 * and revoke only A's rows. (rowLevelSecurity.test.ts covers the second wall.)
 */

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

/** A transaction that row-level security does not filter: the owner's, outside `withTenant`. */
const unfiltered = <T>(work: (tx: DatabaseTransactionConnection) => Promise<T>) => db.pool.transaction(work);

type Side = { readonly tenant: TestTenant; readonly userId: string; readonly refreshToken: string };

/** Tenants A and B, each with a user at the same address and one refresh token, in one shared family. */
async function twoTenantsSharingAnEmail(): Promise<{ email: string; familyId: string; a: Side; b: Side }> {
  const email = `shared-${randomBytes(4).toString('hex')}@example.test`;
  const familyId = randomUUID();
  const side = async (): Promise<Side> => {
    const tenant = await provisionTenant(db.pool);
    const { userId } = await createTestUser(db.pool, tenant, 'hr_manager', { email });
    const refreshToken = await withTenant(db.pool, tenant.tenantId, (tx) =>
      issueRefreshToken(tx, { tenantId: tenant.tenantId, userId, familyId, now: Date.now() }),
    );
    return { tenant, userId, refreshToken };
  };
  const [a, b] = await Promise.all([side(), side()]);
  return { email, familyId, a, b };
}

const tokenState = async (refreshToken: string) =>
  db.pool.one(sql.type(z.object({ rotated: z.boolean(), revoked: z.boolean() }))`
    select rotated_at is not null as rotated, revoked_at is not null as revoked from refresh_tokens where token_hash = ${hashRefreshToken(refreshToken)}
  `);

const untouched = { rotated: false, revoked: false };

describe('on a connection that bypasses row-level security', () => {
  it('the connection really sees both tenants (otherwise these tests prove nothing)', async () => {
    const { email, a, b } = await twoTenantsSharingAnEmail();
    const seen = await unfiltered(async (tx) => {
      const bypasses = await tx.oneFirst(sql.type(z.object({ bypasses: z.boolean() }))`
        select rolsuper or rolbypassrls as bypasses from pg_roles where rolname = current_user
      `);
      const tenants = await tx.anyFirst(sql.type(z.object({ tenant_id: z.string() }))`
        select tenant_id from users where email_key = ${email} order by tenant_id
      `);
      return { bypasses, tenants };
    });
    expect(seen).toEqual({ bypasses: true, tenants: [a.tenant.tenantId, b.tenant.tenantId].sort() });
  });

  describe('when reading users and roles as tenant A', () => {
    it("login credentials and the user by e-mail are A's, though B has the same address", async () => {
      const { email, a, b } = await twoTenantsSharingAnEmail();
      const found = await unfiltered(async (tx) => ({
        credentialsA: await findLoginCredentials(tx, a.tenant.tenantId, email.toUpperCase()),
        credentialsB: await findLoginCredentials(tx, b.tenant.tenantId, email),
        userA: await findUserByEmail(tx, a.tenant.tenantId, email),
      }));
      expect(found.credentialsA).toMatchObject({ id: a.userId, role: 'hr_manager', disabled: false, passwordHash: expect.any(String) });
      expect(found.credentialsB?.id).toBe(b.userId);
      expect(found.userA).toMatchObject({ id: a.userId, email, role: 'hr_manager', hasPassword: true });
    });

    it("B's user is not found by id, and the list holds A's users only", async () => {
      const { a, b } = await twoTenantsSharingAnEmail();
      const found = await unfiltered(async (tx) => ({
        byIdA: await findUserById(tx, a.tenant.tenantId, a.userId),
        byIdB: await findUserById(tx, a.tenant.tenantId, b.userId),
        list: await listUsers(tx, a.tenant.tenantId),
      }));
      expect(found.byIdA?.id).toBe(a.userId);
      expect(found.byIdB).toBeNull();
      expect(found.list.map((u) => u.id)).toEqual([a.userId]);
    });

    it("roles are A's: the list and a role by name", async () => {
      const { a } = await twoTenantsSharingAnEmail();
      const rolesOfA = await db.pool.anyFirst(sql.type(z.object({ id: z.string() }))`
        select id from roles where tenant_id = ${a.tenant.tenantId} order by id
      `);
      const found = await unfiltered(async (tx) => ({
        list: await listRoles(tx, a.tenant.tenantId),
        admin: await findRoleByName(tx, a.tenant.tenantId, 'admin'),
      }));
      expect(found.list.map((r) => r.name)).toEqual(['admin', 'hr_manager', 'analyst', 'employee']);
      expect(found.list.map((r) => r.id).sort()).toEqual([...rolesOfA]);
      expect(rolesOfA).toContain(found.admin?.id);
    });
  });

  describe('when changing users as tenant A', () => {
    it("a new role and disabling reach A's user only; B keeps its role, login and refresh token", async () => {
      const { email, a, b } = await twoTenantsSharingAnEmail();
      await unfiltered(async (tx) => {
        await setUserRole(tx, a.tenant.tenantId, email, 'analyst');
        await disableUser(tx, a.tenant.tenantId, email);
      });
      const after = await unfiltered(async (tx) => ({
        a: await findUserById(tx, a.tenant.tenantId, a.userId),
        b: await findUserById(tx, b.tenant.tenantId, b.userId),
      }));
      expect(after.a).toMatchObject({ role: 'analyst', disabled: true });
      expect(after.b).toMatchObject({ role: 'hr_manager', disabled: false });
      expect(await tokenState(a.refreshToken)).toEqual({ rotated: false, revoked: true });
      expect(await tokenState(b.refreshToken)).toEqual(untouched);
    });

    it("creating A's login is not refused because B has one at that address", async () => {
      const { email, a, b } = await twoTenantsSharingAnEmail();
      const other = await provisionTenant(db.pool);
      const created = await unfiltered((tx) =>
        createUser(tx, { tenantId: other.tenantId, email, password: `pw-${randomBytes(8).toString('hex')}`, role: 'analyst' }),
      );
      expect(created).toMatchObject({ email, role: 'analyst', hasPassword: true });
      expect([a.userId, b.userId]).not.toContain(created.id);
      const tenantOf = await db.pool.oneFirst(
        sql.type(z.object({ tenant_id: z.string() }))`select tenant_id from users where id = ${created.id}`,
      );
      expect(tenantOf).toBe(other.tenantId);
    });
  });

  describe('when rotating and revoking refresh tokens as tenant A', () => {
    it("B's token is invalid for A and stays untouched", async () => {
      const { a, b } = await twoTenantsSharingAnEmail();
      const result = await unfiltered((tx) =>
        rotateRefreshToken(tx, { tenantId: a.tenant.tenantId, refreshToken: b.refreshToken, now: Date.now() }),
      );
      expect(result).toEqual({ kind: 'invalid' });
      expect(await tokenState(b.refreshToken)).toEqual(untouched);
    });

    it("rotating A's token, then reusing it, revokes A's family only, though B's token has the same family id", async () => {
      const { familyId, a, b } = await twoTenantsSharingAnEmail();
      const rotate = () =>
        unfiltered((tx) => rotateRefreshToken(tx, { tenantId: a.tenant.tenantId, refreshToken: a.refreshToken, now: Date.now() }));
      const first = await rotate();
      expect(first).toMatchObject({ kind: 'rotated', userId: a.userId, role: 'hr_manager' });
      expect(await tokenState(b.refreshToken)).toEqual(untouched);

      expect(await rotate()).toEqual({ kind: 'reused' });
      expect(await tokenState(a.refreshToken)).toEqual({ rotated: true, revoked: true });
      if (first.kind === 'rotated') expect(await tokenState(first.refreshToken)).toEqual({ rotated: false, revoked: true });
      expect(await tokenState(b.refreshToken)).toEqual(untouched);
      const familyTenants = await db.pool.anyFirst(sql.type(z.object({ tenant_id: z.string() }))`
        select distinct tenant_id from refresh_tokens where family_id = ${familyId} and revoked_at is null
      `);
      expect(familyTenants).toEqual([b.tenant.tenantId]);
    });

    it("logout as A ignores B's token and revokes A's family without touching B's", async () => {
      const { a, b } = await twoTenantsSharingAnEmail();
      await unfiltered((tx) =>
        revokeRefreshTokenFamily(tx, { tenantId: a.tenant.tenantId, refreshToken: b.refreshToken, userId: b.userId }),
      );
      expect(await tokenState(b.refreshToken)).toEqual(untouched);

      await unfiltered((tx) =>
        revokeRefreshTokenFamily(tx, { tenantId: a.tenant.tenantId, refreshToken: a.refreshToken, userId: a.userId }),
      );
      expect(await tokenState(a.refreshToken)).toEqual({ rotated: false, revoked: true });
      expect(await tokenState(b.refreshToken)).toEqual(untouched);
    });
  });
});
