import { ignoredRows, sql, type DatabasePool } from '../../shared/db/pool.ts';
import { forgetTenantAccounts } from '../auth/forgetAccount.ts';
import { revocableAnalystLogins, revokeAnalystLogin } from '../analysts/logins.ts';
import { holdOffboarding, recordOffboarding, type OffboardingEntry } from './offboardingLedger.ts';

export type AccessCut = {
  /** Logins that lost their address and were disabled now (0 when they were before). */
  readonly logins: number;
  /** The analysts' database logins revoked. */
  readonly analysts: number;
  /** Those of them cut off but not dropped yet (a later revoke finishes them). */
  readonly unfinished: readonly string[];
};

/**
 * The first part of a tenant's offboarding, whoever runs it (`ops tenants erase`, or
 * `ops employees reapply-erasures` after a restore brought the tenant back): every login loses
 * its address and is disabled, its refresh tokens revoked, and the offboarding is recorded in the
 * same transaction; then the analysts' database logins, which read the read models directly, are
 * revoked. Idempotent.
 */
export async function cutTenantAccess(pool: DatabasePool, entry: OffboardingEntry): Promise<AccessCut> {
  const logins = await pool.transaction(async (tx) => {
    // As the owner, not the tenant role, which has no right to the ledger; `users` and
    // `refresh_tokens` force row-level security on the owner too, so this is the tenant's transaction.
    await tx.query(sql.type(ignoredRows)`select set_config('app.tenant_id', ${entry.tenantId}, true)`);
    await holdOffboarding(tx, entry.tenantId, 'exclusive');
    await recordOffboarding(tx, entry);
    return forgetTenantAccounts(tx, entry.tenantId);
  });
  const analysts = await revocableAnalystLogins(pool, entry.tenantId);
  const unfinished: string[] = [];
  for (const login of analysts) if ((await revokeAnalystLogin(pool, login)).dropFailure) unfinished.push(login);
  return { logins, analysts: analysts.length, unfinished };
}
