import { z } from 'zod';
import type { IdentifierSqlToken } from 'slonik';
import { ignoredRows, sql, type Queryable } from '../../shared/db/pool.ts';
import { pgIso } from '../../shared/db/timestamps.ts';
import { readModelTable } from '../../shared/db/rowLevelSecurity.ts';
import type { RecordedEvent } from '../../shared/event-store/port.ts';
import { defineProjection } from '../../shared/projections/projection.ts';
import {
  byEmployee,
  EMPLOYEE_EVENT_TYPES,
  employeeKey,
  employeeOf,
  type EmployeeEvent,
  erasedStreams,
  PERSONAL_FIELDS,
} from '../../services/employees/contract.ts';
import { contributions, evolveVersions, instantMs, redactVersions, type Contribution, type Version } from './versions.ts';
import { redactParkedEvents } from '../../shared/projections/parkedRedactions.ts';

/**
 * The workforce read model: the employee directory in effective time (versions.ts) and daily and
 * monthly counters derived from it, for the directory as of any instant and the workforce series.
 *
 * - `employee_versions`: one row per version of an employee, valid over [valid_from, valid_to)
 *   (valid_to null: in force now), with the employee's last applied stream revision on each row.
 * - `workforce_day_counts` / `workforce_month_counts`: per (tenant, UTC day or month, department,
 *   status) the change in the number of versions in force (`in_force`: +1 where one starts, −1
 *   where one ends), hires and exits. The number in force at the end of a day is the sum of
 *   `in_force` up to it: whole months from the month table, the rest from the day table.
 * - `workforce_day_totals` / `workforce_month_totals`: the same summed over every department, per
 *   (tenant, day or month, status), so that a tenant-wide series reads one row per day and status
 *   rather than one per department as well.
 *
 * A batch loads the versions of the employees it touches (except those it hires), folds its events
 * in memory (events at or below the stored revision are skipped), replaces those employees'
 * versions and adds the counter difference between the old and new versions: a back-dated change
 * rewrites the intervals after its effective instant and moves the counts with them. At most
 * three statements whatever the batch's size.
 */
export const WORKFORCE_PROJECTION = 'employees-workforce';

type Tables = 'employee_versions' | 'workforce_day_counts' | 'workforce_month_counts' | 'workforce_day_totals' | 'workforce_month_totals';

const versionRow = z.object({
  tenant_id: z.string(),
  employee_id: z.string(),
  valid_from: z.string(),
  valid_to: z.string().nullable(),
  department: z.string().nullable(),
  first_name: z.string().nullable(),
  last_name: z.string().nullable(),
  email: z.string().nullable(),
  status: z.enum(['active', 'inactive', 'on_leave']),
  hired_at: z.string(),
  previous_status: z.enum(['active', 'inactive', 'on_leave']).nullable(),
  revision: z.number(),
  erased: z.boolean(),
});

/**
 * `erased`: the person was erased (or their fields no longer open: the erasure follows in the
 * log). Their versions keep counting in the workforce figures but hold no names or email, and the
 * directory as of any instant leaves them out.
 */
type Employee = { tenantId: string; id: string; revision: number; versions: Version[]; erased: boolean };

/** One event folded into an employee: their versions, and whether the person is erased from here on. */
function foldEvent(employee: Employee, recorded: RecordedEvent): void {
  // The event store hands back what the write side stored for these types (contract.ts).
  const event = { type: recorded.type, data: recorded.data } as EmployeeEvent;
  const versions = evolveVersions(employee.versions, event, recordedAtOf(recorded));
  const erased = employee.erased || event.type === 'EmployeeErased' || recorded.redacted === true;
  // Once erased, whatever comes later (a field that opened on a page read before the key went)
  // is redacted too.
  employee.versions = erased ? redactVersions(versions) : versions;
  employee.erased = erased;
  employee.revision = recorded.revision;
}

/** When an event was recorded: the command's clock (metadata), else the store's. */
const recordedAtOf = (event: RecordedEvent): number =>
  instantMs(typeof event.metadata.occurredAt === 'string' ? event.metadata.occurredAt : event.recordedAt, 'occurredAt');

const VERSION_COLUMNS = [
  'tenant_id',
  'employee_id',
  'valid_from',
  'valid_to',
  'department',
  'first_name',
  'last_name',
  'email',
  'status',
  'hired_at',
  'previous_status',
  'revision',
  'erased',
];
const VERSION_TYPES = [
  'uuid',
  'text',
  'timestamptz',
  'timestamptz',
  'text',
  'text',
  'text',
  'text',
  'text',
  'timestamptz',
  'text',
  'int4',
  'bool',
];
const versionTuple = (e: Employee, v: Version) => [
  e.tenantId,
  e.id,
  pgIso(v.validFrom),
  v.validTo === null ? null : pgIso(v.validTo),
  v.department,
  v.firstName,
  v.lastName,
  v.email,
  v.status,
  pgIso(v.hiredAt),
  v.previousStatus,
  e.revision,
  e.erased,
];

async function handle(tx: Queryable, events: readonly RecordedEvent[], tables: Readonly<Record<Tables, IdentifierSqlToken>>) {
  await redactParkedEvents(tx, erasedStreams(events), PERSONAL_FIELDS);
  const touched = byEmployee(events);
  if (touched.size === 0) return;
  // Only employees whose batch does not start with their hire can have versions already (a page of
  // hires, the common case, is then one statement). Were one there all the same, the insert's
  // primary key would refuse the page rather than count anyone twice.
  const list = [...touched.values()].filter((k) => (k.events[0]?.revision ?? 0) > 0);
  const rows =
    list.length === 0
      ? []
      : await tx.any(sql.type(versionRow)`
    select v.tenant_id::text, v.employee_id, v.valid_from, v.valid_to, v.department, v.first_name, v.last_name, v.email,
           v.status, v.hired_at, v.previous_status, v.revision, v.erased
    from ${tables.employee_versions} v
    join unnest(${sql.array(
      list.map((k) => k.tenantId),
      'uuid',
    )}, ${sql.array(
      list.map((k) => k.id),
      'text',
    )}) as k(tenant_id, employee_id)
      on v.tenant_id = k.tenant_id and v.employee_id = k.employee_id
    order by v.tenant_id, v.employee_id, v.valid_from
  `);
  const before = new Map<string, Employee>();
  for (const r of rows) {
    const key = employeeKey(r.tenant_id, r.employee_id);
    const employee = before.get(key) ?? { tenantId: r.tenant_id, id: r.employee_id, revision: r.revision, versions: [], erased: r.erased };
    employee.versions.push({
      validFrom: Date.parse(r.valid_from),
      validTo: r.valid_to === null ? null : Date.parse(r.valid_to),
      department: r.department,
      firstName: r.first_name,
      lastName: r.last_name,
      email: r.email,
      status: r.status,
      hiredAt: Date.parse(r.hired_at),
      previousStatus: r.previous_status,
    });
    before.set(key, employee);
  }

  const changed: Employee[] = [];
  const deltas = new Map<string, Contribution>();
  for (const [key, stream] of touched) {
    const old = before.get(key);
    const employee: Employee = { tenantId: stream.tenantId, id: stream.id, revision: -1, versions: [], erased: false, ...old };
    for (const recorded of stream.events) {
      if (recorded.revision > employee.revision) foldEvent(employee, recorded); // else applied by an earlier batch
    }
    if (employee.revision === (old?.revision ?? -1) || employee.versions.length === 0) continue;
    changed.push(employee);
    if (old) contributions(old.tenantId, old.versions, -1, deltas);
    contributions(stream.tenantId, employee.versions, 1, deltas);
  }
  if (changed.length === 0) return;

  const replaced = changed.filter((e) => before.has(employeeKey(e.tenantId, e.id)));
  if (replaced.length > 0)
    await tx.query(sql.type(ignoredRows)`
    delete from ${tables.employee_versions} v
    using unnest(${sql.array(
      replaced.map((e) => e.tenantId),
      'uuid',
    )}, ${sql.array(
      replaced.map((e) => e.id),
      'text',
    )}) as k(tenant_id, employee_id)
    where v.tenant_id = k.tenant_id and v.employee_id = k.employee_id
  `);
  const counts = [...deltas.values()].filter((d) => d.inForce !== 0 || d.hires !== 0 || d.exits !== 0);
  await tx.query(sql.type(ignoredRows)`
    with inserted as (
      insert into ${tables.employee_versions}
        (tenant_id, employee_id, valid_from, valid_to, department, first_name, last_name, email, status, hired_at, previous_status, revision, erased)
      select * from ${sql.unnest(
        changed.flatMap((e) => e.versions.map((v) => versionTuple(e, v))),
        VERSION_TYPES,
      )}
    ), d as (
      select * from ${sql.unnest(
        counts.map((c) => [c.tenantId, c.day, c.department, c.status, c.inForce, c.hires, c.exits]),
        ['uuid', 'date', 'text', 'text', 'int8', 'int8', 'int8'],
      )} as d(tenant_id, day, department, status, in_force, hires, exits)
    ), months as (
      insert into ${tables.workforce_month_counts} as m (tenant_id, month, department, status, in_force, hires, exits)
      select tenant_id, date_trunc('month', day)::date, department, status, sum(in_force), sum(hires), sum(exits)
      from d group by 1, 2, 3, 4
      on conflict (tenant_id, month, department, status) do update set
        in_force = m.in_force + excluded.in_force, hires = m.hires + excluded.hires, exits = m.exits + excluded.exits
    ), day_totals as (
      -- A move between departments on one day adds nothing to the totals: no row for it.
      insert into ${tables.workforce_day_totals} as t (tenant_id, day, status, in_force, hires, exits)
      select tenant_id, day, status, sum(in_force), sum(hires), sum(exits)
      from d group by 1, 2, 3 having sum(in_force) <> 0 or sum(hires) <> 0 or sum(exits) <> 0
      on conflict (tenant_id, day, status) do update set
        in_force = t.in_force + excluded.in_force, hires = t.hires + excluded.hires, exits = t.exits + excluded.exits
    ), month_totals as (
      insert into ${tables.workforce_month_totals} as t (tenant_id, month, status, in_force, hires, exits)
      select tenant_id, date_trunc('month', day)::date, status, sum(in_force), sum(hires), sum(exits)
      from d group by 1, 2, 3 having sum(in_force) <> 0 or sum(hires) <> 0 or sum(exits) <> 0
      on conflict (tenant_id, month, status) do update set
        in_force = t.in_force + excluded.in_force, hires = t.hires + excluded.hires, exits = t.exits + excluded.exits
    )
    insert into ${tables.workforce_day_counts} as c (tenant_id, day, department, status, in_force, hires, exits)
    select tenant_id, day, department, status, in_force, hires, exits from d
    on conflict (tenant_id, day, department, status) do update set
      in_force = c.in_force + excluded.in_force, hires = c.hires + excluded.hires, exits = c.exits + excluded.exits
  `);
}

/**
 * The bulk path of a rebuild: the same fold over the whole log in memory (one entry per employee),
 * then every version, and the counters of the final versions, which is what the live handler's
 * differences add up to.
 */
function bulkFold() {
  const employees = new Map<string, Employee>();
  return {
    add(events: readonly RecordedEvent[]) {
      for (const event of events) {
        const parsed = employeeOf(event);
        if (!parsed) continue;
        const key = employeeKey(parsed.tenantId, parsed.employeeId);
        const employee = employees.get(key) ?? {
          tenantId: parsed.tenantId,
          id: parsed.employeeId,
          revision: -1,
          versions: [],
          erased: false,
        };
        if (event.revision <= employee.revision) continue;
        foldEvent(employee, event);
        if (employee.versions.length > 0) employees.set(key, employee);
      }
    },
    rows() {
      const versions: (string | number | null)[][] = [];
      const days = new Map<string, Contribution>();
      for (const employee of employees.values()) {
        // COPY's text form of a boolean.
        for (const v of employee.versions)
          versions.push(versionTuple(employee, v).map((x) => (typeof x === 'boolean' ? (x ? 't' : 'f') : x)));
        contributions(employee.tenantId, employee.versions, 1, days);
      }
      const months = rollUp(days.values(), monthOf, true);
      const counters = (map: Map<string, Contribution>, bucket: 'day' | 'month', byDepartment: boolean) => ({
        columns: ['tenant_id', bucket, ...(byDepartment ? ['department'] : []), 'status', 'in_force', 'hires', 'exits'],
        types: ['uuid', 'date', ...(byDepartment ? ['text'] : []), 'text', 'int8', 'int8', 'int8'],
        rows: [...map.values()]
          .filter((c) => c.inForce !== 0 || c.hires !== 0 || c.exits !== 0)
          .map((c) => [c.tenantId, c.day, ...(byDepartment ? [c.department] : []), c.status, c.inForce, c.hires, c.exits]),
      });
      return {
        employee_versions: { columns: VERSION_COLUMNS, types: VERSION_TYPES, rows: versions },
        workforce_day_counts: counters(days, 'day', true),
        workforce_month_counts: counters(months, 'month', true),
        workforce_day_totals: counters(
          rollUp(days.values(), (day) => day, false),
          'day',
          false,
        ),
        workforce_month_totals: counters(
          rollUp(months.values(), (month) => month, false),
          'month',
          false,
        ),
      };
    },
  };
}

/** `YYYY-MM-01` of a `YYYY-MM-DD` day. */
const monthOf = (day: string) => `${day.slice(0, -2)}01`;

/** Counters summed per coarser key: `bucket` of their day, and over every department unless `byDepartment`. */
function rollUp(counters: Iterable<Contribution>, bucket: (day: string) => string, byDepartment: boolean): Map<string, Contribution> {
  const out = new Map<string, Contribution>();
  for (const c of counters) {
    const day = bucket(c.day);
    const department = byDepartment ? c.department : '';
    const key = `${c.tenantId}\u0000${day}\u0000${department}\u0000${c.status}`;
    const sum = out.get(key) ?? { ...c, day, department, inForce: 0, hires: 0, exits: 0 };
    sum.inForce += c.inForce;
    sum.hires += c.hires;
    sum.exits += c.exits;
    out.set(key, sum);
  }
  return out;
}

/** A counter table: per department (`…_counts`) or summed over every department (`…_totals`). */
const counterTable =
  (bucket: 'day' | 'month', byDepartment: boolean) => (table: IdentifierSqlToken, named: (suffix: string) => IdentifierSqlToken) => {
    const column = sql.identifier([bucket]);
    return {
      create: [
        sql.fragment`create table ${table} (
          tenant_id uuid not null,
          ${column} date not null,
          ${byDepartment ? sql.fragment`department text not null,` : sql.fragment``}
          status text not null,
          in_force bigint not null,
          hires bigint not null,
          exits bigint not null
        )`,
        ...readModelTable(table, named, 'read'),
      ],
      afterLoad: [
        byDepartment
          ? sql.fragment`alter table ${table} add constraint ${named('pkey')} primary key (tenant_id, ${column}, department, status)`
          : sql.fragment`alter table ${table} add constraint ${named('pkey')} primary key (tenant_id, ${column}, status)`,
      ],
    };
  };

export const workforceProjection = defineProjection<Tables>({
  name: WORKFORCE_PROJECTION,
  // 2: a status change holds until the next one in effective time; `previous_status` only on
  // versions that start with a status change. 3: `erased`, and names and email nullable. 4: the
  // tenant-wide totals.
  version: 4,
  eventTypes: EMPLOYEE_EVENT_TYPES,
  tables: {
    employee_versions: (table, named) => ({
      create: [
        sql.fragment`create table ${table} (
          tenant_id uuid not null,
          employee_id text not null,
          valid_from timestamptz not null,
          valid_to timestamptz,
          department text,
          first_name text,
          last_name text,
          email text,
          status text not null check (status in ('active', 'inactive', 'on_leave')),
          hired_at timestamptz not null,
          previous_status text,
          revision integer not null,
          erased boolean not null default false
        )`,
        ...readModelTable(table, named, 'read'),
      ],
      afterLoad: [
        sql.fragment`alter table ${table} add constraint ${named('pkey')} primary key (tenant_id, employee_id, valid_from)`,
        // An as-of page walks the list order from `hired_at <= asOf` down and keeps the one version
        // of each employee in force then: about (versions per employee) rows per row returned,
        // however far back asOf lies (docs/decisions/011-effective-dated-versions.md: why not a range index).
        sql.fragment`create index ${named('order')} on ${table} (tenant_id, hired_at desc, employee_id desc)`,
        sql.fragment`create index ${named('department')} on ${table} (tenant_id, department, hired_at desc, employee_id desc)`,
        sql.fragment`create index ${named('status')} on ${table} (tenant_id, status, hired_at desc, employee_id desc)`,
        // The part of a day the counters cannot split: versions starting or ending inside it.
        sql.fragment`create index ${named('starts')} on ${table} (tenant_id, valid_from)`,
        sql.fragment`create index ${named('ends')} on ${table} (tenant_id, valid_to) where valid_to is not null`,
        // The erased, whom an as-of total takes off the counters (which go on counting them).
        sql.fragment`create index ${named('erased')} on ${table} (tenant_id, valid_from) where erased`,
      ],
    }),
    workforce_day_counts: counterTable('day', true),
    workforce_month_counts: counterTable('month', true),
    workforce_day_totals: counterTable('day', false),
    workforce_month_totals: counterTable('month', false),
  },
  handle,
  bulk: { fold: bulkFold },
});
