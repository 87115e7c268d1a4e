import { z } from 'zod';
import { ignoredRows, sql, type Queryable } from '../../shared/db/pool.ts';
import { UnprocessableError } from '../../shared/errors.ts';
import { BUILT_IN_ROLES, permissionsOf, type Permission } from './permissions.ts';

/**
 * Roles are rows per tenant (uuid ids, so clients can send a `roleId`); what a role may do is
 * not stored with it but read from the one permission matrix in permissions.ts.
 * Every function here expects a transaction opened with `withTenant` (row-level security), and
 * every query also names `tenantId` explicitly: row-level security is the second wall, not the only one.
 */
export type Role = { readonly id: string; readonly name: string; readonly permissions: readonly Permission[] };

const roleRow = z.object({ id: z.string(), name: z.string() }).transform((row): Role => ({ ...row, permissions: permissionsOf(row.name) }));

export async function ensureBuiltInRoles(tx: Queryable, tenantId: string): Promise<void> {
  await tx.query(sql.type(ignoredRows)`
    insert into roles (tenant_id, name)
    select ${tenantId}, name from unnest(${sql.array([...BUILT_IN_ROLES], 'text')}) as name
    on conflict (tenant_id, name) do nothing
  `);
}

/** Ordered as the matrix lists them (most powerful first). */
export async function listRoles(tx: Queryable, tenantId: string): Promise<readonly Role[]> {
  return tx.any(sql.type(roleRow)`
    select id, name from roles where tenant_id = ${tenantId}
    order by array_position(${sql.array([...BUILT_IN_ROLES], 'text')}, name), name
  `);
}

export async function findRoleByName(tx: Queryable, tenantId: string, name: string): Promise<Role | null> {
  return tx.maybeOne(sql.type(roleRow)`select id, name from roles where tenant_id = ${tenantId} and name = ${name}`);
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * For the employees capability: a `roleId` that names no role of this tenant is a 422.
 * `tenantId` is checked explicitly as well as by row-level security, so the answer is right
 * even on a connection that bypasses it.
 */
export async function assertRoleExists(tx: Queryable, tenantId: string, roleId: string): Promise<Role> {
  const role = UUID.test(roleId)
    ? await tx.maybeOne(sql.type(roleRow)`select id, name from roles where id = ${roleId} and tenant_id = ${tenantId}`)
    : null;
  if (!role) {
    throw new UnprocessableError(`roleId ${roleId} names no role of this tenant; GET /v1/roles lists them`, {
      errors: [{ path: 'body.roleId', message: 'unknown role' }],
    });
  }
  return role;
}
