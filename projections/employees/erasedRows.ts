import type { IdentifierSqlToken } from 'slonik';
import { ignoredRows, sql, type Queryable } from '../../shared/db/pool.ts';
import type { Tables } from './employeesProjection.ts';

/**
 * Deletes the rows of erased employees and takes them off the counters, in one statement; the
 * counters lose exactly the rows deleted, so applying it again changes nothing.
 */
export async function deleteErasedRows(
  tx: Queryable,
  rows: ReadonlyArray<{ readonly tenant_id: string; readonly id: string }>,
  tables: Readonly<Record<Tables, IdentifierSqlToken>>,
): Promise<void> {
  await tx.query(sql.type(ignoredRows)`
    with gone as (
      delete from ${tables.employees} t
      using unnest(${sql.array(
        rows.map((r) => r.tenant_id),
        'uuid',
      )}, ${sql.array(
        rows.map((r) => r.id),
        'text',
      )}) as k(tenant_id, id)
      where t.tenant_id = k.tenant_id and t.id = k.id
      returning t.tenant_id, t.status, coalesce(t.department, '') as department,
        date_trunc('month', t.hired_at at time zone 'UTC')::date as month, (t.hired_at at time zone 'UTC')::date as day
    ), counts as (
      insert into ${tables.employee_counts} (tenant_id, status, department, count)
      select tenant_id, status, department, -count(*) from gone group by 1, 2, 3
      on conflict (tenant_id, status, department) do update set count = ${tables.employee_counts}.count + excluded.count
    ), months as (
      insert into ${tables.employee_month_counts} (tenant_id, month, status, department, count)
      select tenant_id, month, status, department, -count(*) from gone group by 1, 2, 3, 4
      on conflict (tenant_id, month, status, department) do update set count = ${tables.employee_month_counts}.count + excluded.count
    )
    insert into ${tables.employee_day_counts} (tenant_id, day, status, department, count)
    select tenant_id, day, status, department, -count(*) from gone group by 1, 2, 3, 4
    on conflict (tenant_id, day, status, department) do update set count = ${tables.employee_day_counts}.count + excluded.count
  `);
}
