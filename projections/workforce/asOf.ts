import { sql, type DatabasePool } from '../../shared/db/pool.ts';
import type { TenantReader } from '../../shared/db/tenantReader.ts';
import { rangeEnd } from '../../shared/validation.ts';
import { inTenant, notInErasureLedger, pageRow, type ListEmployeesQuery } from '../employees/queries.ts';
import { floorTo, inclusiveEnd } from '../../shared/series/intervals.ts';
import { pgDate, pgIso } from '../../shared/db/timestamps.ts';

/**
 * The directory as it was at an instant, from `employee_versions` (workforceProjection.ts): each
 * employee hired by then appears once, with the version in force then (department, names, email
 * and status of that moment), in the list's usual order (hiredAt desc, id desc).
 *
 * The page walks the order index from `hired_at <= asOf` down; every employee hired by asOf has
 * exactly one version in force at asOf, so a page reads about (versions per employee) × (offset +
 * limit) rows, whether asOf is today or years back. `meta.total` comes from the daily and monthly
 * counters (the number in force at the end of the day before asOf) plus the versions that start or
 * end in asOf's own day up to asOf, less the erased (absent from the directory, still counted by
 * the counters); with a hire-date range it counts the matching versions.
 */
export type AsOfQuery = ListEmployeesQuery & { readonly asOf: number };

function conditions(tenantId: string, query: AsOfQuery) {
  const at = pgIso(query.asOf);
  const parts = [
    sql.fragment`tenant_id = ${tenantId}::uuid`,
    sql.fragment`hired_at <= ${at}::timestamptz`,
    sql.fragment`valid_from <= ${at}::timestamptz`,
    sql.fragment`(valid_to is null or valid_to > ${at}::timestamptz)`,
    sql.fragment`not erased`,
  ];
  if (query.department !== undefined) parts.push(sql.fragment`department = ${query.department}`);
  if (query.status !== undefined) parts.push(sql.fragment`status = ${query.status}`);
  if (query.hiredFrom) parts.push(sql.fragment`hired_at >= ${query.hiredFrom.at}::timestamptz`);
  if (query.hiredTo) {
    const end = rangeEnd(query.hiredTo);
    parts.push(
      end.inclusive ? sql.fragment`hired_at <= ${pgIso(end.ms)}::timestamptz` : sql.fragment`hired_at < ${pgIso(end.ms)}::timestamptz`,
    );
  }
  return sql.join(parts, sql.fragment` and `);
}

/** The number in force at `asOf` (inclusive) with these keys, from the counters and asOf's own day. */
function totalExpression(tenantId: string, query: AsOfQuery) {
  if (query.hiredFrom || query.hiredTo) {
    // The counters are not kept per hire date: count the matching versions, a cost that grows with
    // the employees hired in the range (docs/api.md says so).
    return sql.fragment`(select count(*) from employee_versions where ${conditions(tenantId, query)})`;
  }
  const keys = [sql.fragment`tenant_id = ${tenantId}::uuid`];
  if (query.department !== undefined) keys.push(sql.fragment`department = ${query.department}`);
  if (query.status !== undefined) keys.push(sql.fragment`status = ${query.status}`);
  const key = sql.join(keys, sql.fragment` and `);
  const end = inclusiveEnd(query.asOf);
  const day = floorTo('day', end);
  const month = floorTo('month', day);
  const d = pgDate;
  const at = pgIso(query.asOf);
  // The counters go on counting the erased (the workforce figures keep them); the directory does
  // not list them, so its total takes off those in force at asOf (a partial index: few rows).
  return sql.fragment`(
    (select coalesce(sum(in_force), 0) from workforce_month_counts where ${key} and month < ${d(month)}::date)
    + (select coalesce(sum(in_force), 0) from workforce_day_counts where ${key} and day >= ${d(month)}::date and day < ${d(day)}::date)
    + (select count(*) from employee_versions where ${key}
         and valid_from >= ${pgIso(day)}::timestamptz and valid_from < ${pgIso(end)}::timestamptz)
    - (select count(*) from employee_versions where ${key}
         and valid_to >= ${pgIso(day)}::timestamptz and valid_to < ${pgIso(end)}::timestamptz)
    - (select count(*) from employee_versions where ${key} and erased and hired_at <= ${at}::timestamptz
         and valid_from <= ${at}::timestamptz and (valid_to is null or valid_to > ${at}::timestamptz))
  )`;
}

/** The one statement of an as-of list read: the page and the total, like the current list's. */
export function listEmployeesAsOfStatement(tenantId: string, query: AsOfQuery) {
  return sql.type(pageRow)`
    select t.total::int8 as total, p.*
    from (select ${totalExpression(tenantId, query)} as total) t
    left join lateral (
      select employee_id as id, email, first_name, last_name, department, status, hired_at, revision
      from employee_versions where ${conditions(tenantId, query)} and ${notInErasureLedger('employee_versions', 'employee_id')}
      order by hired_at desc, employee_id desc
      limit ${query.limit} offset ${(query.page - 1) * query.limit}
    ) p on true
  `;
}

export async function listEmployeesAsOf(scope: DatabasePool | TenantReader, tenantId: string, query: AsOfQuery) {
  return inTenant(scope, tenantId, async (tx) => {
    const rows = await tx.any(listEmployeesAsOfStatement(tenantId, query));
    return { data: rows.flatMap((r) => (r.record ? [r.record] : [])), total: rows[0]?.total ?? 0 };
  });
}
