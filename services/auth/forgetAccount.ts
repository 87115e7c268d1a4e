import { z } from 'zod';
import { sql, type Queryable } from '../../shared/db/pool.ts';
import { normaliseEmail } from '../../shared/email.ts';

/**
 * The login of a person who was erased: its address gives way to one that names nobody
 * (`erased-<user id>@erased.invalid`, a reserved domain), it is disabled, and its refresh tokens
 * are revoked (access tokens already issued expire within 15 minutes). The row stays, so what
 * refers to the user (audit actors) still resolves. Expects the tenant set for the transaction
 * (`app.tenant_id`); true when there was such a login.
 */
export async function forgetAccount(tx: Queryable, tenantId: string, email: string): Promise<boolean> {
  const id = await tx.maybeOneFirst(sql.type(z.object({ id: z.string() }))`
    update users set
      email = 'erased-' || id::text || '@erased.invalid', email_key = 'erased-' || id::text || '@erased.invalid',
      disabled_at = coalesce(disabled_at, now()), updated_at = now()
    where tenant_id = ${tenantId} and email_key = ${normaliseEmail(email)}
    returning id::text
  `);
  if (!id) return false;
  await tx.query(sql.type(z.object({}))`
    update refresh_tokens set revoked_at = now() where tenant_id = ${tenantId} and user_id = ${id} and revoked_at is null
  `);
  return true;
}

/**
 * Every login of a tenant forgets its address and is disabled (a tenant's offboarding), as
 * `forgetAccount` does for one; a login forgotten before is left as it is. Returns how many
 * changed. Expects the tenant set for the transaction.
 */
export async function forgetTenantAccounts(tx: Queryable, tenantId: string): Promise<number> {
  const ids = await tx.anyFirst(sql.type(z.object({ id: z.string() }))`
    update users set
      email = 'erased-' || id::text || '@erased.invalid', email_key = 'erased-' || id::text || '@erased.invalid',
      disabled_at = coalesce(disabled_at, now()), updated_at = now()
    where tenant_id = ${tenantId} and email_key <> 'erased-' || id::text || '@erased.invalid'
    returning id::text
  `);
  await tx.query(sql.type(z.object({}))`
    update refresh_tokens set revoked_at = now() where tenant_id = ${tenantId} and revoked_at is null
  `);
  return ids.length;
}
