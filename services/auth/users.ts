import { z } from 'zod';
import { idRow, ignoredRows, sql, type Queryable } from '../../shared/db/pool.ts';
import { normaliseEmail } from '../../shared/email.ts';
import { ConflictError, NotFoundError } from '../../shared/errors.ts';
import { hashPassword } from './passwords.ts';
import { findRoleByName } from './roles.ts';

/**
 * Users are logins; `users.role_id` is the one source of truth for a person's role (see
 * docs/rbac.md). Every function expects a transaction opened with `withTenant`, and every query
 * also names `tenantId` explicitly (on each table it touches): row-level security is the second
 * wall, not the only one. Addresses are matched by `email_key`, the service's one normalisation
 * (shared/email.ts), never by SQL lower().
 */
export type User = {
  readonly id: string;
  readonly email: string;
  readonly role: string;
  readonly roleId: string;
  readonly disabled: boolean;
  readonly hasPassword: boolean;
};

const userRow = z
  .object({
    id: z.string(),
    email: z.string(),
    role: z.string(),
    role_id: z.string(),
    disabled: z.boolean(),
    has_password: z.boolean(),
  })
  .transform((r): User => ({
    id: r.id,
    email: r.email,
    role: r.role,
    roleId: r.role_id,
    disabled: r.disabled,
    hasPassword: r.has_password,
  }));

const userColumns = sql.fragment`
  u.id, u.email, r.name as role, u.role_id, u.disabled_at is not null as disabled, u.password_hash is not null as has_password
`;

async function roleIdByName(tx: Queryable, tenantId: string, role: string): Promise<string> {
  const found = await findRoleByName(tx, tenantId, role);
  if (!found) throw new NotFoundError(`No role named ${role} in this tenant`);
  return found.id;
}

/** `users u` joined to its role, both sides limited to `tenantId`. */
const usersWithRoles = (tenantId: string) => sql.fragment`
  users u join roles r on r.id = u.role_id and r.tenant_id = ${tenantId}
`;

export async function findUserByEmail(tx: Queryable, tenantId: string, email: string): Promise<User | null> {
  return tx.maybeOne(sql.type(userRow)`
    select ${userColumns} from ${usersWithRoles(tenantId)}
    where u.tenant_id = ${tenantId} and u.email_key = ${normaliseEmail(email)}
  `);
}

export async function findUserById(tx: Queryable, tenantId: string, userId: string): Promise<User | null> {
  return tx.maybeOne(sql.type(userRow)`
    select ${userColumns} from ${usersWithRoles(tenantId)} where u.tenant_id = ${tenantId} and u.id = ${userId}
  `);
}

export async function listUsers(tx: Queryable, tenantId: string): Promise<readonly User[]> {
  return tx.any(sql.type(userRow)`
    select ${userColumns} from ${usersWithRoles(tenantId)} where u.tenant_id = ${tenantId} order by u.email_key
  `);
}

const credentialsRow = z.object({ id: z.string(), role: z.string(), password_hash: z.string().nullable(), disabled: z.boolean() });

/** What login needs: the hash is read only here and never leaves this module's callers. */
export async function findLoginCredentials(
  tx: Queryable,
  tenantId: string,
  email: string,
): Promise<{ id: string; role: string; passwordHash: string | null; disabled: boolean } | null> {
  const row = await tx.maybeOne(sql.type(credentialsRow)`
    select u.id, r.name as role, u.password_hash, u.disabled_at is not null as disabled
    from ${usersWithRoles(tenantId)} where u.tenant_id = ${tenantId} and u.email_key = ${normaliseEmail(email)}
  `);
  return row && { id: row.id, role: row.role, passwordHash: row.password_hash, disabled: row.disabled };
}

/** The refusal of a second login at an address; it does not quote the address (logs and terminals keep none). */
const USER_EXISTS = 'A user of this tenant already has this email';

/**
 * Creates a login. An account that exists without a password (made from an employee's
 * `roleId`) gets its password and, if given, role; any other existing email is a conflict. One
 * statement decides, so a login made at the address meanwhile (another run, the role reactor's
 * account for a hire there) is met as if it had been there first; the read before it spares the
 * password's hashing when the login is there already (every start that bootstraps its admin).
 */
export async function createUser(tx: Queryable, input: { tenantId: string; email: string; password: string; role: string }): Promise<User> {
  const { tenantId } = input;
  const roleId = await roleIdByName(tx, tenantId, input.role);
  if ((await findUserByEmail(tx, tenantId, input.email))?.hasPassword) throw new ConflictError(USER_EXISTS);
  const passwordHash = await hashPassword(input.password);
  const id = await tx.maybeOneFirst(sql.type(idRow)`
    insert into users as u (tenant_id, email, email_key, password_hash, role_id, role_set_at)
    values (${tenantId}, ${input.email}, ${normaliseEmail(input.email)}, ${passwordHash}, ${roleId}, now())
    on conflict (tenant_id, email_key) do update
      set password_hash = excluded.password_hash, role_id = excluded.role_id, role_set_at = now(), updated_at = now()
      where u.password_hash is null
    returning u.id
  `);
  if (!id) throw new ConflictError(USER_EXISTS);
  const user = await findUserById(tx, tenantId, id);
  if (!user) throw new Error('user vanished after insert');
  return user;
}

/** Role changes reach access tokens at the user's next refresh (at most 15 minutes). */
export async function setUserRole(tx: Queryable, tenantId: string, email: string, role: string): Promise<User> {
  const roleId = await roleIdByName(tx, tenantId, role);
  const id = await tx.maybeOneFirst(sql.type(idRow)`
    update users set role_id = ${roleId}, role_set_at = now(), updated_at = now()
    where tenant_id = ${tenantId} and email_key = ${normaliseEmail(email)} returning id
  `);
  if (!id) throw new NotFoundError('No user of this tenant has this email');
  const user = await findUserById(tx, tenantId, id);
  if (!user) throw new Error('user vanished after update');
  return user;
}

/** Disables the login and revokes every refresh token; access tokens already issued expire within 15 minutes. */
export async function disableUser(tx: Queryable, tenantId: string, email: string): Promise<User> {
  const id = await tx.maybeOneFirst(sql.type(idRow)`
    update users set disabled_at = coalesce(disabled_at, now()), updated_at = now()
    where tenant_id = ${tenantId} and email_key = ${normaliseEmail(email)} returning id
  `);
  if (!id) throw new NotFoundError('No user of this tenant has this email');
  await tx.query(sql.type(ignoredRows)`
    update refresh_tokens set revoked_at = now() where tenant_id = ${tenantId} and user_id = ${id} and revoked_at is null
  `);
  const user = await findUserById(tx, tenantId, id);
  if (!user) throw new Error('user vanished after update');
  return user;
}
