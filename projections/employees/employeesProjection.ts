import { z } from 'zod';
import { sql, type DatabaseTransactionConnection } from '../../shared/db/pool.ts';
import type { RecordedEvent } from '../../shared/event-store/port.ts';
import type { IdentifierSqlToken } from 'slonik';
import { defineProjection } from '../runner/projection.ts';
import {
  EMPLOYEE_EVENT_TYPES,
  parseEmployeeStreamId,
  type EmployeeEvent,
  type EmployeeStatus,
} from '../../services/employees/events.ts';

/**
 * The employees read model: one row per employee (SPEC fields + tenant + stream revision) and
 * exact counters per (tenant, status, department) so `meta.total` never has to count a big
 * tenant's rows when only those filters are used.
 *
 * A batch is applied set-wise, at most three statements whatever its size: load the rows of
 * employees it does not hire itself, fold its events in memory, upsert the rows (guarded by
 * revision) and add the counter deltas of the rows actually written. Events at or below a row's
 * revision are skipped, so applying a batch twice changes nothing.
 */
export const EMPLOYEES_PROJECTION = 'employees';

const tenantPolicy = (table: IdentifierSqlToken, named: (suffix: string) => IdentifierSqlToken) => [
  sql.fragment`alter table ${table} enable row level security`,
  sql.fragment`alter table ${table} force row level security`,
  sql.fragment`create policy ${named('tenant')} on ${table} using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)`,
  sql.fragment`grant select, insert, update, delete on ${table} to eas_tenant`,
];

type Row = {
  tenant_id: string;
  id: string;
  email: string;
  first_name: string;
  last_name: string;
  department: string | null;
  status: EmployeeStatus;
  hired_at: string;
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
  revision: z.number(),
  updated_at: z.string(),
});

/** Counters key a missing department as '' (a department filter is never empty). */
const counterKey = (row: Pick<Row, 'tenant_id' | 'status' | 'department'>) => `${row.tenant_id}\u0000${row.status}\u0000${row.department ?? ''}`;

function apply(row: Row | undefined, event: EmployeeEvent, recorded: RecordedEvent, tenantId: string): Row | undefined {
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
    case 'EmployeeStatusChanged':
      return row && { ...row, status: event.data.to, ...touched };
    case 'EmployeeRoleAssigned':
      return row && { ...row, ...touched }; // the role itself lives with the user (services/auth)
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}

const isEmployeeEvent = (event: RecordedEvent): boolean => (EMPLOYEE_EVENT_TYPES as readonly string[]).includes(event.type);

async function handle(
  tx: DatabaseTransactionConnection,
  events: readonly RecordedEvent[],
  tables: Readonly<Record<'employees' | 'employee_counts', IdentifierSqlToken>>,
): Promise<void> {
  const keyOf = (tenantId: string, id: string) => `${tenantId}/${id}`;
  // Per employee, its events of this batch in order (the batch is in global order).
  const streams = new Map<string, { tenantId: string; id: string; events: RecordedEvent[] }>();
  for (const event of events) {
    const parsed = isEmployeeEvent(event) ? parseEmployeeStreamId(event.streamId) : undefined;
    if (!parsed) continue;
    const key = keyOf(parsed.tenantId, parsed.employeeId);
    const stream = streams.get(key) ?? { tenantId: parsed.tenantId, id: parsed.employeeId, events: [] };
    stream.events.push(event);
    streams.set(key, stream);
  }
  if (streams.size === 0) return;
  // Only employees whose batch does not start with their hire can already have a row.
  const known = [...streams.values()].filter((s) => (s.events[0]?.revision ?? 0) > 0);
  const existing =
    known.length === 0
      ? []
      : await tx.any(sql.type(employeeRowSchema)`
          select e.tenant_id::text, e.id, e.email, e.first_name, e.last_name, e.department, e.status, e.hired_at,
                 e.revision, e.updated_at
          from ${tables.employees} e
          join unnest(${sql.array(known.map((k) => k.tenantId), 'uuid')}, ${sql.array(known.map((k) => k.id), 'text')}) as k(tenant_id, id)
            on e.tenant_id = k.tenant_id and e.id = k.id
        `);
  const before = new Map<string, Row>(existing.map((r) => [keyOf(r.tenant_id, r.id), r]));
  const changed: Row[] = [];
  for (const [key, stream] of streams) {
    const start = before.get(key);
    let row = start;
    for (const recorded of stream.events) {
      if (row && recorded.revision <= row.revision) continue; // already applied
      // The event store hands back what the write side stored for these types.
      row = apply(row, { type: recorded.type, data: recorded.data } as EmployeeEvent, recorded, stream.tenantId) ?? row;
    }
    if (row && row.revision !== start?.revision) changed.push(row);
  }
  if (changed.length === 0) return;

  // The revision guard makes a re-applied hire a no-op; only rows actually written count.
  const written = await tx.any(sql.type(z.object({ tenant_id: z.string(), id: z.string() }))`
    insert into ${tables.employees} as t
      (tenant_id, id, email, first_name, last_name, department, status, hired_at, revision, updated_at)
    select * from ${sql.unnest(
      changed.map((r) => [r.tenant_id, r.id, r.email, r.first_name, r.last_name, r.department, r.status, r.hired_at, r.revision, r.updated_at]),
      ['uuid', 'text', 'text', 'text', 'text', 'text', 'text', 'timestamptz', 'int4', 'timestamptz'],
    )}
    on conflict (tenant_id, id) do update set
      email = excluded.email, first_name = excluded.first_name, last_name = excluded.last_name,
      department = excluded.department, status = excluded.status, hired_at = excluded.hired_at,
      revision = excluded.revision, updated_at = excluded.updated_at
    where t.revision < excluded.revision
    returning t.tenant_id::text, t.id
  `);
  const writtenKeys = new Set(written.map((w) => keyOf(w.tenant_id, w.id)));

  const deltas = new Map<string, { tenant_id: string; status: string; department: string; delta: number }>();
  const bump = (row: Pick<Row, 'tenant_id' | 'status' | 'department'>, delta: number) => {
    const key = counterKey(row);
    const entry = deltas.get(key) ?? { tenant_id: row.tenant_id, status: row.status, department: row.department ?? '', delta: 0 };
    entry.delta += delta;
    deltas.set(key, entry);
  };
  for (const row of changed) {
    const key = keyOf(row.tenant_id, row.id);
    if (!writtenKeys.has(key)) continue;
    const old = before.get(key);
    if (old) bump(old, -1);
    bump(row, 1);
  }
  const nonZero = [...deltas.values()].filter((d) => d.delta !== 0);
  if (nonZero.length > 0) {
    await tx.query(sql.type(z.object({}))`
      insert into ${tables.employee_counts} (tenant_id, status, department, count)
      select * from ${sql.unnest(
        nonZero.map((d) => [d.tenant_id, d.status, d.department, d.delta]),
        ['uuid', 'text', 'text', 'int8'],
      )}
      on conflict (tenant_id, status, department) do update set count = ${tables.employee_counts}.count + excluded.count
    `);
  }
}

export const employeesProjection = defineProjection({
  name: EMPLOYEES_PROJECTION,
  version: 1,
  eventTypes: EMPLOYEE_EVENT_TYPES,
  tables: {
    employees: (table, named) => [
      sql.fragment`create table ${table} (
        tenant_id uuid not null,
        id text not null,
        email text not null,
        first_name text not null,
        last_name text not null,
        department text,
        status text not null check (status in ('active', 'inactive', 'on_leave')),
        hired_at timestamptz not null,
        revision integer not null,
        updated_at timestamptz not null,
        constraint ${named('pkey')} primary key (tenant_id, id)
      )`,
      // The default order is (hired_at desc, id desc); each filter has an index ending in it,
      // so a page is an index range scan that stops after `limit` rows.
      sql.fragment`create index ${named('order')} on ${table} (tenant_id, hired_at desc, id desc)`,
      sql.fragment`create index ${named('status')} on ${table} (tenant_id, status, hired_at desc, id desc)`,
      sql.fragment`create index ${named('department')} on ${table} (tenant_id, department, hired_at desc, id desc)`,
      sql.fragment`create index ${named('department_status')} on ${table} (tenant_id, department, status, hired_at desc, id desc)`,
      ...tenantPolicy(table, named),
    ],
    employee_counts: (table, named) => [
      sql.fragment`create table ${table} (
        tenant_id uuid not null,
        status text not null,
        department text not null,
        count bigint not null,
        constraint ${named('pkey')} primary key (tenant_id, status, department)
      )`,
      ...tenantPolicy(table, named),
    ],
  },
  handle,
});
