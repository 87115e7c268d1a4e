import { z } from 'zod';
import { ignoredRows, sql, type DatabasePool, type Queryable } from '../../shared/db/pool.ts';
import { ConflictError } from '../../shared/errors.ts';

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

const offboardedRow = z.object({ offboarded: z.boolean() });

/** Whether the tenant was offboarded (`db` as the service's own role: the ledger is granted to no other). */
export async function isOffboarded(db: Queryable, tenantId: string): Promise<boolean> {
  return db.oneFirst(sql.type(offboardedRow)`
    select exists (select 1 from tenant_offboardings where tenant_id = ${tenantId}) as offboarded
  `);
}

/**
 * An offboarding is final: nobody is given a login or a database login in that tenant again. A
 * tenant taken back into use would mix people hired since with those a restored backup brings
 * back, and `reapply-erasures`, which offboards such a tenant again whole, would erase them too.
 * A customer who comes back gets a new tenant.
 */
export async function refuseOffboarded(db: Queryable, tenantId: string, slug: string): Promise<void> {
  if (await isOffboarded(db, tenantId)) throw new ConflictError(`tenant ${slug} was offboarded (tenants erase): it takes no new logins`);
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
 * Every offboarding recorded (of one tenant, when given), each once, at its first `offboardedAt`:
 * in a copy of the ledger kept outside the backups (`kept`) and in the ledger table.
 */
export async function offboardingsToReapply(pool: DatabasePool, tenantId?: string, kept: readonly OffboardingEntry[] = []) {
  const first = new Map<string, OffboardingEntry>();
  const fromCopy = kept.filter((e) => tenantId === undefined || e.tenantId === tenantId);
  for (const entry of [...fromCopy, ...(await listOffboardings(pool, tenantId))]) {
    const seen = first.get(entry.tenantId);
    if (!seen || Date.parse(entry.offboardedAt) < Date.parse(seen.offboardedAt)) first.set(entry.tenantId, entry);
  }
  return [...first.values()];
}
