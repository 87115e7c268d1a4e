import { z } from 'zod';
import { ignoredRows, sql, type DatabasePool, type Queryable } from '../../shared/db/pool.ts';

/**
 * The erasure ledger (`employee_erasures`): tenant, employee id and when, nothing personal. Each
 * erasure records itself here in its own transaction; `ops employees reapply-erasures` reads it
 * to erase again what a restored backup brought back.
 */
export type ErasureEntry = { readonly tenantId: string; readonly employeeId: string; readonly erasedAt: string };

/** Records an erasure; the first `erasedAt` of an employee stands (an erasure is repeated, never moved). */
export async function recordErasure(tx: Queryable, entry: ErasureEntry): Promise<void> {
  await tx.query(sql.type(ignoredRows)`
    insert into employee_erasures (tenant_id, employee_id, erased_at)
    values (${entry.tenantId}, ${entry.employeeId}, ${entry.erasedAt})
    on conflict (tenant_id, employee_id) do nothing
  `);
}

const entryRow = z.object({ tenant_id: z.string(), employee_id: z.string(), erased_at: z.string() });

/** Every ledger entry (of one tenant, when given), oldest erasure first. */
export async function listErasures(pool: DatabasePool, tenantId?: string): Promise<ErasureEntry[]> {
  const rows = await pool.any(sql.type(entryRow)`
    select tenant_id::text, employee_id,
      to_char(erased_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as erased_at
    from employee_erasures
    ${tenantId === undefined ? sql.fragment`` : sql.fragment`where tenant_id = ${tenantId}`}
    order by erased_at, tenant_id, employee_id
  `);
  return rows.map((r) => ({ tenantId: r.tenant_id, employeeId: r.employee_id, erasedAt: r.erased_at }));
}
