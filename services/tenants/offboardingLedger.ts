import { z } from 'zod';
import { ignoredRows, sql, type DatabasePool, type DatabaseTransactionConnection, type Queryable } from '../../shared/db/pool.ts';
import { earliestEach } from '../../shared/earliest.ts';
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
async function isOffboarded(db: Queryable, tenantId: string): Promise<boolean> {
  return db.oneFirst(sql.type(offboardedRow)`
    select exists (select 1 from tenant_offboardings where tenant_id = ${tenantId}) as offboarded
  `);
}

/**
 * Orders a tenant's offboarding and whatever would give the tenant a login, until the caller's
 * transaction ends: the offboarding takes it exclusively before it records itself and forgets the
 * logins, a creator shared before it reads the ledger and creates (`unlessOffboarded`). So a
 * login is either made before the offboarding, and forgotten by it, or refused after it; never
 * made unseen in between. An advisory lock: the ledger has no row to lock before the offboarding
 * records one.
 */
export async function holdOffboarding(tx: Queryable, tenantId: string, mode: 'exclusive' | 'shared'): Promise<void> {
  const key = sql.fragment`hashtextextended(${`tenant-offboarding:${tenantId}`}, 0)`;
  await tx.query(
    mode === 'exclusive'
      ? sql.type(ignoredRows)`select pg_advisory_xact_lock(${key})`
      : sql.type(ignoredRows)`select pg_advisory_xact_lock_shared(${key})`,
  );
}

/**
 * An offboarding is final: nobody is given a login or a database login in that tenant again. A
 * tenant taken back into use would mix people hired since with those a restored backup brings
 * back, and `reapply-erasures`, which offboards such a tenant again whole, would erase them too.
 * A customer who comes back gets a new tenant.
 */
export const offboardedError = (slug: string): ConflictError =>
  new ConflictError(`tenant ${slug} was offboarded (tenants erase): it takes no new logins`);

/**
 * `work` in a transaction of the tenant's that an offboarding cannot overtake unseen: as the
 * service's own role with the tenant set (`app.tenant_id`; the login tables force row-level
 * security on that role too, as the offboarding's own transaction relies on), the offboarding
 * lock held shared, and the ledger read after it (the tenant role could not read it). `offboarded`
 * and nothing done when the tenant was offboarded.
 */
export async function unlessOffboarded<T>(
  pool: DatabasePool,
  tenantId: string,
  work: (tx: DatabaseTransactionConnection) => Promise<T>,
): Promise<{ readonly offboarded: true } | { readonly offboarded: false; readonly value: T }> {
  return pool.transaction(async (tx) => {
    await tx.query(sql.type(ignoredRows)`select set_config('app.tenant_id', ${tenantId}, true)`);
    await holdOffboarding(tx, tenantId, 'shared');
    if (await isOffboarded(tx, tenantId)) return { offboarded: true as const };
    return { offboarded: false as const, value: await work(tx) };
  });
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
  const fromCopy = kept.filter((e) => tenantId === undefined || e.tenantId === tenantId);
  const entries = [...fromCopy, ...(await listOffboardings(pool, tenantId))];
  return [
    ...earliestEach(
      entries,
      (e) => e.tenantId,
      (e) => e.offboardedAt,
    ).values(),
  ];
}
