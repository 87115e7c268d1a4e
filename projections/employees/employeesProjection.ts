import { z } from 'zod';
import { ignoredRows, sql, type Queryable } from '../../shared/db/pool.ts';
import { readModelTable } from '../../shared/db/rowLevelSecurity.ts';
import type { RecordedEvent } from '../../shared/event-store/port.ts';
import type { IdentifierSqlToken } from 'slonik';
import { defineProjection } from '../../shared/projections/projection.ts';
import { deleteErasedRows } from './erasedRows.ts';
import { counterKeys, createCounterDeltas } from './counters.ts';
import {
  byEmployee,
  EMPLOYEE_EVENT_TYPES,
  employeeKey,
  employeeOf,
  statusAppliesFrom,
  type EmployeeEvent,
  type EmployeeStatus,
  erasedStreams,
  PERSONAL_FIELDS,
} from '../../services/employees/contract.ts';
import { redactParkedEvents } from '../../shared/projections/parkedRedactions.ts';

/**
 * The employees read model: one row per employee (its API fields + tenant + stream revision) and
 * exact counters per (tenant, status, department), and per the same key and hire month / hire
 * day (UTC), so `meta.total` never counts a big tenant's rows: without a hire-date range it reads
 * the first; with one it sums whole months, then the whole days of the two edge months, and
 * counts rows only inside the (at most two) partial edge days (queries.ts).
 *
 * A batch is applied set-wise, at most three statements whatever its size: load the rows of
 * employees it does not hire itself, fold its events in memory, upsert the rows (guarded by
 * revision) and add the counter deltas of the rows actually written. Events at or below a row's
 * revision are skipped, so applying a batch twice changes nothing.
 */
export const EMPLOYEES_PROJECTION = 'employees';

export type Row = {
  tenant_id: string;
  id: string;
  email: string;
  first_name: string;
  last_name: string;
  department: string | null;
  status: EmployeeStatus;
  hired_at: string;
  /** When the status in force now took effect: a back-dated change older than it rewrites only the past. */
  status_since: string;
  revision: number;
  updated_at: string;
};

/** A row of the `employees` read model, as PostgreSQL returns it (queries.ts reads the same shape). */
export const employeeRowSchema = z.object({
  tenant_id: z.string(),
  id: z.string(),
  email: z.string(),
  first_name: z.string(),
  last_name: z.string(),
  department: z.string().nullable(),
  status: z.enum(['active', 'inactive', 'on_leave']),
  hired_at: z.string(),
  status_since: z.string(),
  revision: z.number(),
  updated_at: z.string(),
});

export type Tables = 'employees' | 'employee_counts' | 'employee_month_counts' | 'employee_day_counts';

/**
 * What an event makes of an employee's row: the new row, undefined (unchanged) or `ERASED`: an
 * erased person is in no list, so the row goes, and with it the list totals' share of it.
 */
const ERASED = 'erased';
type Folded = Row | typeof ERASED | undefined;

function apply(row: Row | undefined, event: EmployeeEvent, recorded: RecordedEvent, tenantId: string): Folded {
  const touched = { revision: recorded.revision, updated_at: recorded.recordedAt };
  switch (event.type) {
    case 'EmployeeHired': {
      const d = event.data;
      return {
        tenant_id: tenantId,
        id: d.employeeId,
        email: d.email,
        first_name: d.firstName,
        last_name: d.lastName,
        department: d.department,
        status: d.status,
        hired_at: d.hiredAt,
        status_since: d.hiredAt,
        ...touched,
      };
    }
    case 'EmployeeDetailsChanged': {
      if (!row) return row;
      const { firstName, lastName, department } = event.data;
      return {
        ...row,
        ...(firstName !== undefined && { first_name: firstName }),
        ...(lastName !== undefined && { last_name: lastName }),
        ...(department !== undefined && { department }),
        ...touched,
      };
    }
    case 'EmployeeEmailChanged':
      return row && { ...row, email: event.data.email, ...touched };
    case 'EmployeeStatusChanged': {
      if (!row) return row;
      // The same rule as the aggregate's evolve: the status in force now is the latest effective.
      const from = statusAppliesFrom(event.data, row.hired_at);
      return Date.parse(from) >= Date.parse(row.status_since)
        ? { ...row, status: event.data.to, status_since: from, ...touched }
        : { ...row, ...touched };
    }
    case 'EmployeeRoleAssigned':
      return row && { ...row, ...touched }; // the role itself lives with the user (services/auth)
    case 'EmployeeErased':
      return ERASED;
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}

/**
 * Folds one event into `row` unless the row already reflects it (revision guard), the one
 * place both the live handler and the bulk fold go through.
 */
function fold(row: Row | undefined, recorded: RecordedEvent, tenantId: string): Folded {
  if (row && recorded.revision <= row.revision) return row; // already applied
  // Fields that cannot be opened any more (the key is destroyed) belong to an erased person, whose
  // erasure follows in the log: in no list from here on (a rebuild after the erasure builds no row).
  if (recorded.redacted) return ERASED;
  // The event store hands back what the write side stored for these types.
  return apply(row, { type: recorded.type, data: recorded.data } as EmployeeEvent, recorded, tenantId) ?? row;
}

const EMPLOYEE_COLUMNS = [
  'tenant_id',
  'id',
  'email',
  'first_name',
  'last_name',
  'department',
  'status',
  'hired_at',
  'status_since',
  'revision',
  'updated_at',
] as const;
const EMPLOYEE_TYPES = [
  'uuid',
  'text',
  'text',
  'text',
  'text',
  'text',
  'text',
  'timestamptz',
  'timestamptz',
  'int4',
  'timestamptz',
] as const;
const employeeTuple = (r: Row) => [
  r.tenant_id,
  r.id,
  r.email,
  r.first_name,
  r.last_name,
  r.department,
  r.status,
  r.hired_at,
  r.status_since,
  r.revision,
  r.updated_at,
];

async function handle(
  tx: Queryable,
  events: readonly RecordedEvent[],
  tables: Readonly<Record<Tables, IdentifierSqlToken>>,
): Promise<void> {
  await redactParkedEvents(tx, erasedStreams(events), PERSONAL_FIELDS);
  // Per employee, its events of this batch in order (the batch is in global order).
  const streams = byEmployee(events);
  if (streams.size === 0) return;
  // Only employees whose batch does not start with their hire can already have a row.
  const known = [...streams.values()].filter((s) => (s.events[0]?.revision ?? 0) > 0);
  const existing =
    known.length === 0
      ? []
      : await tx.any(sql.type(employeeRowSchema)`
          select e.tenant_id::text, e.id, e.email, e.first_name, e.last_name, e.department, e.status, e.hired_at,
                 e.status_since, e.revision, e.updated_at
          from ${tables.employees} e
          join unnest(${sql.array(
            known.map((k) => k.tenantId),
            'uuid',
          )}, ${sql.array(
            known.map((k) => k.id),
            'text',
          )}) as k(tenant_id, id)
            on e.tenant_id = k.tenant_id and e.id = k.id
        `);
  const before = new Map<string, Row>(existing.map((r) => [employeeKey(r.tenant_id, r.id), r]));
  const changed: Row[] = [];
  const erased: Row[] = [];
  for (const [key, stream] of streams) {
    const start = before.get(key);
    let row: Folded = start;
    for (const recorded of stream.events) if (row !== ERASED) row = fold(row, recorded, stream.tenantId);
    if (row === ERASED) {
      if (start) erased.push(start);
    } else if (row && row.revision !== start?.revision) changed.push(row);
  }
  if (erased.length > 0) await deleteErasedRows(tx, erased, tables);
  if (changed.length === 0) return;

  // One statement (one round trip of the page transaction): the upsert, whose revision guard
  // makes a re-applied hire a no-op, and the counter deltas of the rows it actually wrote. Each
  // changed row brings its deltas (minus its old counter keys, plus its new ones), joined to what
  // the upsert returned; the three counter tables then take their sums per key.
  const delta: Array<[string, string, string, string, string, string, number]> = [];
  const count = (row: Row, counted: Row, sign: number) => {
    const k = counterKeys(counted);
    delta.push([row.tenant_id, row.id, k.status, k.department, k.monthStart, k.dayStart, sign]);
  };
  for (const row of changed) {
    const old = before.get(employeeKey(row.tenant_id, row.id));
    if (old) count(row, old, -1);
    count(row, row, 1);
  }
  await tx.query(sql.type(ignoredRows)`
    with written as (
      insert into ${tables.employees} as t
        (tenant_id, id, email, first_name, last_name, department, status, hired_at, status_since, revision, updated_at)
      select * from ${sql.unnest(changed.map(employeeTuple), [...EMPLOYEE_TYPES])}
      on conflict (tenant_id, id) do update set
        email = excluded.email, first_name = excluded.first_name, last_name = excluded.last_name,
        department = excluded.department, status = excluded.status, hired_at = excluded.hired_at,
        status_since = excluded.status_since, revision = excluded.revision, updated_at = excluded.updated_at
      where t.revision < excluded.revision
      returning t.tenant_id, t.id
    ), d as (
      select d.tenant_id, d.status, d.department, d.month, d.day, d.delta
      from ${sql.unnest(delta, ['uuid', 'text', 'text', 'text', 'date', 'date', 'int8'])} as d(tenant_id, id, status, department, month, day, delta)
      join written w on w.tenant_id = d.tenant_id and w.id = d.id
    ), counts as (
      insert into ${tables.employee_counts} (tenant_id, status, department, count)
      select tenant_id, status, department, sum(delta) from d group by 1, 2, 3 having sum(delta) <> 0
      on conflict (tenant_id, status, department) do update set count = ${tables.employee_counts}.count + excluded.count
    ), months as (
      insert into ${tables.employee_month_counts} (tenant_id, month, status, department, count)
      select tenant_id, month, status, department, sum(delta) from d group by 1, 2, 3, 4 having sum(delta) <> 0
      on conflict (tenant_id, month, status, department) do update set count = ${tables.employee_month_counts}.count + excluded.count
    )
    insert into ${tables.employee_day_counts} (tenant_id, day, status, department, count)
    select tenant_id, day, status, department, sum(delta) from d group by 1, 2, 3, 4 having sum(delta) <> 0
    on conflict (tenant_id, day, status, department) do update set count = ${tables.employee_day_counts}.count + excluded.count
  `);
}

/**
 * The bulk path of a rebuild: the same `fold` over the whole log in memory (one Map entry per
 * employee), then every row and counter at once. Counters are derived from the final rows, which
 * is what the live handler's deltas add up to.
 */
function bulkFold() {
  const rows = new Map<string, Row>();
  return {
    add(events: readonly RecordedEvent[]) {
      for (const event of events) {
        const parsed = employeeOf(event);
        if (!parsed) continue;
        const key = employeeKey(parsed.tenantId, parsed.employeeId);
        const before = rows.get(key);
        const after = fold(before, event, parsed.tenantId);
        if (after === ERASED) rows.delete(key);
        else if (after && after !== before) rows.set(key, after);
      }
    },
    rows() {
      const deltas = createCounterDeltas();
      const employees: (string | number | null)[][] = [];
      for (const row of rows.values()) {
        employees.push(employeeTuple(row));
        deltas.bump(row, 1);
      }
      const { all, month, day } = deltas.nonZero();
      const counterColumns = ['tenant_id', 'status', 'department', 'count'];
      return {
        employees: { columns: EMPLOYEE_COLUMNS, types: EMPLOYEE_TYPES, rows: employees },
        employee_counts: {
          columns: counterColumns,
          types: ['uuid', 'text', 'text', 'int8'],
          rows: all.map((d) => [d.tenant_id, d.status, d.department, d.delta]),
        },
        employee_month_counts: {
          columns: ['tenant_id', 'month', 'status', 'department', 'count'],
          types: ['uuid', 'date', 'text', 'text', 'int8'],
          rows: month.map((d) => [d.tenant_id, d.bucket, d.status, d.department, d.delta]),
        },
        employee_day_counts: {
          columns: ['tenant_id', 'day', 'status', 'department', 'count'],
          types: ['uuid', 'date', 'text', 'text', 'int8'],
          rows: day.map((d) => [d.tenant_id, d.bucket, d.status, d.department, d.delta]),
        },
      };
    },
  };
}

/** A counter table keyed by tenant, an optional date bucket, status and department. */
const counterTable = (bucket: 'month' | 'day' | null) => (table: IdentifierSqlToken, named: (suffix: string) => IdentifierSqlToken) => ({
  create: [
    bucket === null
      ? sql.fragment`create table ${table} (tenant_id uuid not null, status text not null, department text not null, count bigint not null)`
      : sql.fragment`create table ${table} (tenant_id uuid not null, ${sql.identifier([bucket])} date not null, status text not null, department text not null, count bigint not null)`,
    ...readModelTable(table, named, 'read-write'),
  ],
  // Range scans by (tenant, bucket), filtering status/department inside the range.
  afterLoad: [
    bucket === null
      ? sql.fragment`alter table ${table} add constraint ${named('pkey')} primary key (tenant_id, status, department)`
      : sql.fragment`alter table ${table} add constraint ${named('pkey')} primary key (tenant_id, ${sql.identifier([bucket])}, status, department)`,
  ],
});

export const employeesProjection = defineProjection<Tables>({
  name: EMPLOYEES_PROJECTION,
  // 2: hire-month and hire-day counters; 3: `status_since`, for back-dated status changes.
  version: 3,
  eventTypes: EMPLOYEE_EVENT_TYPES,
  tables: {
    employees: (table, named) => ({
      create: [
        sql.fragment`create table ${table} (
          tenant_id uuid not null,
          id text not null,
          email text not null,
          first_name text not null,
          last_name text not null,
          department text,
          status text not null check (status in ('active', 'inactive', 'on_leave')),
          hired_at timestamptz not null,
          status_since timestamptz not null,
          revision integer not null,
          updated_at timestamptz not null
        )`,
        ...readModelTable(table, named, 'read-write'),
      ],
      afterLoad: [
        sql.fragment`alter table ${table} add constraint ${named('pkey')} primary key (tenant_id, id)`,
        // The default order is (hired_at desc, id desc); each filter has an index ending in it,
        // so a page is an index range scan that stops after `limit` rows.
        sql.fragment`create index ${named('order')} on ${table} (tenant_id, hired_at desc, id desc)`,
        sql.fragment`create index ${named('status')} on ${table} (tenant_id, status, hired_at desc, id desc)`,
        sql.fragment`create index ${named('department')} on ${table} (tenant_id, department, hired_at desc, id desc)`,
        sql.fragment`create index ${named('department_status')} on ${table} (tenant_id, department, status, hired_at desc, id desc)`,
      ],
    }),
    employee_counts: counterTable(null),
    employee_month_counts: counterTable('month'),
    employee_day_counts: counterTable('day'),
  },
  handle,
  bulk: { fold: bulkFold },
});
