import { z } from 'zod';
import { sql, withTenant, type DatabasePool } from '../../shared/db/pool.ts';
import { pgDate, pgIso } from '../../shared/db/timestamps.ts';
import type { TenantQueryable, TenantReader } from '../../shared/db/tenantReader.ts';
import { rangeEnd, type DateBound } from '../../shared/validation.ts';
import type { Employee, EmployeeStatus } from '../../services/employees/contract.ts';

/**
 * Reads of the employees read model. Every read runs through `withTenant` (row-level security
 * as the second wall) and also filters by tenant explicitly (so the indexes apply).
 */
export type EmployeeRecord = Omit<Employee, 'roleId'> & { readonly revision: number };

const columns = sql.fragment`id, email, first_name, last_name, department, status, hired_at, revision`;

export type EmployeeFilter = {
  readonly department?: string;
  readonly status?: EmployeeStatus;
  /** Inclusive. A date means from its first instant (UTC). */
  readonly hiredFrom?: DateBound;
  /** Inclusive. A date means up to its last instant (UTC). */
  readonly hiredTo?: DateBound;
};

export type ListEmployeesQuery = EmployeeFilter & { readonly page: number; readonly limit: number };

function conditions(tenantId: string, filter: EmployeeFilter) {
  const parts = [sql.fragment`tenant_id = ${tenantId}::uuid`];
  if (filter.department !== undefined) parts.push(sql.fragment`department = ${filter.department}`);
  if (filter.status !== undefined) parts.push(sql.fragment`status = ${filter.status}`);
  if (filter.hiredFrom || filter.hiredTo) {
    // The upper bound is the exact UTC instant `totalExpression` counts up to (`rangeEnd`),
    // computed here, not in SQL: `timestamptz + interval '1 day'` adds a day of the session's time
    // zone (23 or 25 h across a DST change), so rows and `meta.total` disagreed on a database not
    // set to UTC.
    const end = filter.hiredTo ? rangeEnd(filter.hiredTo) : null;
    parts.push(sql.fragment`${instantRange(filter.hiredFrom?.at ?? null, end && pgIso(end.ms), end?.inclusive ?? false)}`);
  }
  return sql.join(parts, sql.fragment` and `);
}

/** `hired_at` within [from, to) (or [from, to] when `toInclusive`); either end may be open. */
const instantRange = (from: string | null, to: string | null, toInclusive: boolean) =>
  sql.join(
    [
      sql.fragment`true`,
      ...(from === null ? [] : [sql.fragment`hired_at >= ${from}::timestamptz`]),
      ...(to === null ? [] : [toInclusive ? sql.fragment`hired_at <= ${to}::timestamptz` : sql.fragment`hired_at < ${to}::timestamptz`]),
    ],
    sql.fragment` and `,
  );

const DAY_MS = 86_400_000;
const floorDay = (ms: number) => Math.floor(ms / DAY_MS) * DAY_MS;
const ceilDay = (ms: number) => Math.ceil(ms / DAY_MS) * DAY_MS;
const floorMonth = (ms: number) => {
  const d = new Date(ms);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
};
const ceilMonth = (ms: number) => {
  const start = floorMonth(ms);
  if (start === ms) return ms;
  const d = new Date(start);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
};

/**
 * How a hire-date range splits for counting (all UTC): whole months come from the month
 * counters, whole days of the edge months from the day counters, and only the instants of the
 * two partial edge days (none for date-only bounds) from the rows themselves. So the cost is
 * O(months + days in two months + rows in two days), never O(rows in the range).
 * `null` bounds are open ends. `upperInclusive`: the range ends at `upper` itself (a
 * date-time `hiredTo`) rather than just before it (a date's next midnight).
 */
export type HireRangePlan = {
  /** Rows counted directly: [lower, firstDay) and [lastDay, upper) / [lastDay, upper]. */
  readonly rows: { readonly from: number | null; readonly to: number | null }[];
  /** Day counters, [from, to) in `YYYY-MM-DD`. */
  readonly days: { readonly from: string | null; readonly to: string | null }[];
  /** Month counters, [from, to) in `YYYY-MM-DD` (first of the month). */
  readonly months: { readonly from: string | null; readonly to: string | null } | null;
};

export function planHireRange(lower: number | null, upper: number | null, upperInclusive: boolean): HireRangePlan {
  const firstDay = lower === null ? null : ceilDay(lower);
  // An inclusive end at midnight still holds that instant: count it from the rows.
  const lastDay = upper === null ? null : floorDay(upper);
  if (firstDay !== null && lastDay !== null && firstDay >= lastDay) {
    return { rows: [{ from: lower, to: upper }], days: [], months: null };
  }
  const rows: { from: number | null; to: number | null }[] = [];
  if (lower !== null && firstDay !== null && lower < firstDay) rows.push({ from: lower, to: firstDay });
  if (upper !== null && lastDay !== null && (upperInclusive || lastDay < upper)) rows.push({ from: lastDay, to: upper });
  const firstMonth = firstDay === null ? null : ceilMonth(firstDay);
  const lastMonth = lastDay === null ? null : floorMonth(lastDay);
  const day = (ms: number | null) => (ms === null ? null : pgDate(ms));
  if (firstMonth !== null && lastMonth !== null && firstMonth >= lastMonth) {
    return { rows, days: [{ from: day(firstDay), to: day(lastDay) }], months: null };
  }
  const days: { from: string | null; to: string | null }[] = [];
  if (firstDay !== null && firstMonth !== null && firstDay < firstMonth) days.push({ from: day(firstDay), to: day(firstMonth) });
  if (lastDay !== null && lastMonth !== null && lastMonth < lastDay) days.push({ from: day(lastMonth), to: day(lastDay) });
  return { rows, days, months: { from: day(firstMonth), to: day(lastMonth) } };
}

/** `meta.total` as one scalar expression: counters only, plus the rows of partial edge days. */
function totalExpression(tenantId: string, filter: EmployeeFilter) {
  const keys = [sql.fragment`tenant_id = ${tenantId}::uuid`];
  if (filter.department !== undefined) keys.push(sql.fragment`department = ${filter.department}`);
  if (filter.status !== undefined) keys.push(sql.fragment`status = ${filter.status}`);
  const key = sql.join(keys, sql.fragment` and `);
  if (!filter.hiredFrom && !filter.hiredTo) {
    return sql.fragment`(select coalesce(sum(count), 0) from employee_counts where ${key})`;
  }
  const lower = filter.hiredFrom ? Date.parse(filter.hiredFrom.at) : null;
  const end = filter.hiredTo ? rangeEnd(filter.hiredTo) : null;
  const upper = end?.ms ?? null;
  const upperInclusive = end?.inclusive ?? false;
  const plan = planHireRange(lower, upper, upperInclusive);
  const dayRange = (column: 'month' | 'day', from: string | null, to: string | null) => {
    const col = sql.identifier([column]);
    return sql.join(
      [
        sql.fragment`true`,
        ...(from === null ? [] : [sql.fragment`${col} >= ${from}::date`]),
        ...(to === null ? [] : [sql.fragment`${col} < ${to}::date`]),
      ],
      sql.fragment` and `,
    );
  };
  const iso = (ms: number | null) => (ms === null ? null : pgIso(ms));
  const terms = [
    ...(plan.months
      ? [
          sql.fragment`(select coalesce(sum(count), 0) from employee_month_counts where ${key} and ${dayRange('month', plan.months.from, plan.months.to)})`,
        ]
      : []),
    ...plan.days.map(
      (d) => sql.fragment`(select coalesce(sum(count), 0) from employee_day_counts where ${key} and ${dayRange('day', d.from, d.to)})`,
    ),
    ...plan.rows.map((r) => {
      const inclusive = upperInclusive && r.to === upper;
      return sql.fragment`(select count(*) from employees where ${key} and ${instantRange(iso(r.from), iso(r.to), inclusive)})`;
    }),
  ];
  return terms.length === 0 ? sql.fragment`0` : sql.join(terms, sql.fragment` + `);
}

/**
 * A page in the documented order: `hiredAt` descending, then `id` descending (ULIDs sort by
 * creation, so among equal hire instants the newest record comes first). `total` is exact and
 * never counts a tenant's rows: see `totalExpression` and `planHireRange`.
 *
 * Page and total are ONE statement (the total rides on every row; an empty page still yields
 * one row with it), so a list read is one round trip inside the tenant scope.
 */
export async function listEmployees(scope: DatabasePool | TenantReader, tenantId: string, query: ListEmployeesQuery) {
  return inTenant(scope, tenantId, async (tx) => {
    const rows = await tx.any(listEmployeesStatement(tenantId, query));
    const total = rows[0]?.total ?? 0;
    const data = rows.flatMap((r) => (r.record ? [r.record] : []));
    return { data, total };
  });
}

/** A tenant-scoped read: through the transaction-free reader when there is one, else in a `withTenant` transaction. */
export function inTenant<T>(scope: DatabasePool | TenantReader, tenantId: string, work: (db: TenantQueryable) => Promise<T>): Promise<T> {
  return 'read' in scope ? scope.read(tenantId, work) : withTenant(scope, tenantId, work);
}

/**
 * SQL: the employee of the `table` row at hand is not one the erasure ledger
 * (`employee_erasures`, the employees capability's table) records as erased. The projector takes
 * an erased person out of a read model only when it applies the erasure, which may lag, be
 * stopped, or wait behind a parked event of theirs; the ledger has it from the erasure's commit,
 * so a list never shows them after it. One probe of the ledger's primary key per row a page reads.
 * Totals come from counters and still count such a person until the projector applies the erasure.
 */
export const notInErasureLedger = (table: 'employees' | 'employee_versions', idColumn: 'id' | 'employee_id') =>
  sql.fragment`not exists (select 1 from employee_erasures r
    where r.tenant_id = ${sql.identifier([table, 'tenant_id'])} and r.employee_id = ${sql.identifier([table, idColumn])})`;

/** The one statement of a list read (exported for the bench's bare-server baseline, which runs the same SQL). */
export function listEmployeesStatement(tenantId: string, query: ListEmployeesQuery) {
  return sql.type(pageRow)`
    select t.total::int8 as total, p.*
    from (select ${totalExpression(tenantId, query)} as total) t
    left join lateral (
      select ${columns} from employees where ${conditions(tenantId, query)} and ${notInErasureLedger('employees', 'id')}
      order by hired_at desc, id desc
      limit ${query.limit} offset ${(query.page - 1) * query.limit}
    ) p on true
  `;
}

/** A page row: the total, and an employee unless the page is empty (then its columns are null). */
export const pageRow = z
  .object({
    total: z.number(),
    id: z.string().nullable(),
    email: z.string().nullable(),
    first_name: z.string().nullable(),
    last_name: z.string().nullable(),
    department: z.string().nullable(),
    status: z.enum(['active', 'inactive', 'on_leave']).nullable(),
    hired_at: z.string().nullable(),
    revision: z.number().nullable(),
  })
  .transform((r): { total: number; record: EmployeeRecord | null } => {
    if (
      r.id === null ||
      r.email === null ||
      r.first_name === null ||
      r.last_name === null ||
      r.status === null ||
      r.hired_at === null ||
      r.revision === null
    ) {
      return { total: r.total, record: null };
    }
    return {
      total: r.total,
      record: {
        id: r.id,
        email: r.email,
        firstName: r.first_name,
        lastName: r.last_name,
        department: r.department,
        status: r.status,
        hiredAt: r.hired_at,
        revision: r.revision,
      },
    };
  });
