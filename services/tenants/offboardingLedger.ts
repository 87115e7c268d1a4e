import { z } from 'zod';
import { ignoredRows, sql, type DatabasePool, type Queryable } from '../../shared/db/pool.ts';

/**
 * The offboarding ledger (`tenant_offboardings`): which tenants were erased and when, nothing
 * personal. `ops tenants erase` records itself here with the logins it forgets;
 * `ops employees reapply-erasures` reads it to offboard again a tenant a restored backup brought
 * back. Employees erased with it are in the erasure ledger, each on their own.
 */
export type OffboardingEntry = { readonly tenantId: string; readonly offboardedAt: string };

/** Records an offboarding; the first `offboardedAt` of a tenant stands (an offboarding is repeated, never moved). */
export async function recordOffboarding(tx: Queryable, entry: OffboardingEntry): Promise<void> {
  await tx.query(sql.type(ignoredRows)`
    insert into tenant_offboardings (tenant_id, offboarded_at)
    values (${entry.tenantId}, ${entry.offboardedAt})
    on conflict (tenant_id) do nothing
  `);
}

const entryRow = z.object({ tenant_id: z.string(), offboarded_at: z.string() });

/** Every offboarding (of one tenant, when given), oldest first. */
export async function listOffboardings(pool: DatabasePool, tenantId?: string): Promise<OffboardingEntry[]> {
  const rows = await pool.any(sql.type(entryRow)`
    select tenant_id::text,
      to_char(offboarded_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as offboarded_at
    from tenant_offboardings
    ${tenantId === undefined ? sql.fragment`` : sql.fragment`where tenant_id = ${tenantId}`}
    order by offboarded_at, tenant_id
  `);
  return rows.map((r) => ({ tenantId: r.tenant_id, offboardedAt: r.offboarded_at }));
}

/**
 * The offboardings a restore undid: in the copy of the ledger kept outside the backups (`kept`),
 * of one tenant when given, each at its first `offboardedAt`, but not in the ledger table. A
 * tenant the restored database records as offboarded was offboarded in it (its logins were
 * forgotten in that very transaction): the logins it has now were made since, by a tenant taken
 * back into use, and stay.
 */
export async function offboardingsToReapply(pool: DatabasePool, tenantId?: string, kept: readonly OffboardingEntry[] = []) {
  const recorded = new Set((await listOffboardings(pool, tenantId)).map((e) => e.tenantId));
  const first = new Map<string, OffboardingEntry>();
  for (const entry of kept) {
    if ((tenantId !== undefined && entry.tenantId !== tenantId) || recorded.has(entry.tenantId)) continue;
    const seen = first.get(entry.tenantId);
    if (!seen || Date.parse(entry.offboardedAt) < Date.parse(seen.offboardedAt)) first.set(entry.tenantId, entry);
  }
  return [...first.values()];
}
