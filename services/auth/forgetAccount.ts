import type { FragmentSqlToken } from 'slonik';
import { idRow, ignoredRows, sql, type Queryable } from '../../shared/db/pool.ts';
import { normaliseEmail } from '../../shared/email.ts';

/** The address a forgotten login gets: it names nobody (a reserved domain) and stays unique. */
const FORGOTTEN = sql.fragment`'erased-' || id::text || '@erased.invalid'`;

/**
 * The logins of `tenantId` that `which` selects (SQL over `users`) forget their address and are
 * disabled, and their refresh tokens are revoked (access tokens already issued expire within 15
 * minutes). The rows stay, so what refers to a user (audit actors) still resolves; a login
 * forgotten before is left as it is. Expects the tenant set for the transaction (`app.tenant_id`).
 * Returns the ids of the logins that changed.
 */
async function forgetLogins(tx: Queryable, tenantId: string, which: FragmentSqlToken): Promise<readonly string[]> {
  const ids = await tx.anyFirst(sql.type(idRow)`
    update users set email = ${FORGOTTEN}, email_key = ${FORGOTTEN}, disabled_at = coalesce(disabled_at, now()), updated_at = now()
    where tenant_id = ${tenantId} and email_key <> ${FORGOTTEN} and (${which})
    returning id::text
  `);
  if (ids.length > 0)
    await tx.query(sql.type(ignoredRows)`
      update refresh_tokens set revoked_at = now()
      where tenant_id = ${tenantId} and user_id = any(${sql.array([...ids], 'uuid')}) and revoked_at is null
    `);
  return ids;
}

/**
 * The login at `email` (a person who was erased) is forgotten; true when there was such a login.
 * With `madeBy` (an ISO 8601 instant), only if it was made by then, to the millisecond (the
 * precision of the instants the event store hands back). One made within that millisecond counts:
 * a login lost is made again, an erased person's password kept at their address is not undone.
 */
export async function forgetAccount(tx: Queryable, tenantId: string, email: string, madeBy: string | null = null): Promise<boolean> {
  const made = madeBy === null ? sql.fragment`true` : sql.fragment`date_trunc('milliseconds', created_at) <= ${madeBy}::timestamptz`;
  return (await forgetLogins(tx, tenantId, sql.fragment`email_key = ${normaliseEmail(email)} and ${made}`)).length > 0;
}

/** These logins (by user id) are forgotten: those a person who was erased was given a role on. */
export async function forgetAccountsById(tx: Queryable, tenantId: string, userIds: readonly string[]): Promise<number> {
  if (userIds.length === 0) return 0;
  return (await forgetLogins(tx, tenantId, sql.fragment`id = any(${sql.array([...userIds], 'uuid')})`)).length;
}

/** Every login of a tenant is forgotten (a tenant's offboarding). Returns how many changed. */
export async function forgetTenantAccounts(tx: Queryable, tenantId: string): Promise<number> {
  return (await forgetLogins(tx, tenantId, sql.fragment`true`)).length;
}
