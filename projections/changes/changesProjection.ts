import { z } from 'zod';
import type { IdentifierSqlToken } from 'slonik';
import { sql, type Queryable } from '../../shared/db/pool.ts';
import { tenantScopedTable } from '../../shared/db/rowLevelSecurity.ts';
import type { RecordedEvent } from '../../shared/event-store/port.ts';
import { defineProjection } from '../../shared/projections/projection.ts';
import {
  EMPLOYEE_EVENT_TYPES,
  EMPLOYEE_STATUSES,
  parseEmployeeStreamId,
  type EmployeeEvent,
  type EmployeeEventType,
  evolve,
  toEmployeeView,
  type EmployeeState,
} from '../../services/employees/contract.ts';
// The feed's `employee` must be exactly the state the write side computes after the change, so
// it folds with the aggregate's own `evolve` instead of a second copy that could drift.

/**
 * The change feed's read model: one row per employee event, keyed by tenant and the
 * event's global log position, carrying the public change type and the employee's state after
 * it, and numbered in the order the rows were applied (`seq`, an identity). Rows commit one
 * batch at a time (every batch, and `projections retry`, first locks the projection's
 * checkpoint row and only then inserts, so `seq` grows in commit order), and the store never
 * hands out an event while an earlier one could still commit. So `seq` is log order, except for
 * a change that `projections retry` applies after the fix of its parked event: it comes after
 * the newer changes already applied, instead of filling a gap behind readers who are past it.
 * The feed pages by `seq` and names a change by its log position (the cursor): a rebuild
 * (replay) writes the same positions, so cursors stay valid across it.
 */
export const CHANGES_PROJECTION = 'employees-changes';
/** NOTIFY channel, payload = tenant id: wakes long-polling feed readers and webhook dispatch. */
export const CHANGES_CHANNEL = 'employee_changes';

export const CHANGE_TYPES = {
  EmployeeHired: 'employee.hired',
  EmployeeDetailsChanged: 'employee.details_changed',
  EmployeeEmailChanged: 'employee.email_changed',
  EmployeeStatusChanged: 'employee.status_changed',
  EmployeeRoleAssigned: 'employee.role_assigned',
} as const satisfies Record<EmployeeEventType, string>;

export type ChangeType = (typeof CHANGE_TYPES)[EmployeeEventType];
export const PUBLIC_CHANGE_TYPES = Object.values(CHANGE_TYPES) as readonly ChangeType[];

const tenantPolicy = (table: IdentifierSqlToken, named: (suffix: string) => IdentifierSqlToken) =>
  tenantScopedTable(table, named('tenant'), 'read');

const lastStateRow = z.object({
  tenant_id: z.string(),
  employee_id: z.string(),
  revision: z.number(),
  employee: z.record(z.string(), z.unknown()),
  role_id: z.string().nullable(),
});

/** The employee as a change carries it (stored with the change, read back by the feed). */
export const employeeView = z.object({
  id: z.string(),
  email: z.string(),
  firstName: z.string(),
  lastName: z.string(),
  department: z.string().nullable(),
  status: z.enum(EMPLOYEE_STATUSES),
  hiredAt: z.string(),
});
export type EmployeeView = z.infer<typeof employeeView>;

const isEmployeeEvent = (type: string): type is EmployeeEventType => (EMPLOYEE_EVENT_TYPES as readonly string[]).includes(type);

type ChangeRow = {
  tenantId: string;
  commit: string;
  prepare: string;
  employeeId: string;
  revision: number;
  type: ChangeType;
  occurredAt: string;
  employee: string;
  roleId: string | null;
};

async function handle(
  tx: Queryable,
  events: readonly RecordedEvent[],
  tables: Readonly<Record<'employee_changes', IdentifierSqlToken>>,
): Promise<void> {
  const key = (tenantId: string, id: string) => `${tenantId}/${id}`;
  // The batch's employee events, each with its stream, in the batch's (log) order: the rows are
  // inserted in that order and draw their `seq` from it (`order by u.n` below).
  const employeeEvents: Array<{ recorded: RecordedEvent; k: string; tenantId: string; employeeId: string }> = [];
  const firstRevision = new Map<string, { tenantId: string; employeeId: string; revision: number }>();
  for (const recorded of events) {
    const parsed = isEmployeeEvent(recorded.type) ? parseEmployeeStreamId(recorded.streamId) : undefined;
    if (!parsed) continue;
    const k = key(parsed.tenantId, parsed.employeeId);
    employeeEvents.push({ recorded, k, ...parsed });
    if (!firstRevision.has(k)) firstRevision.set(k, { ...parsed, revision: recorded.revision });
  }
  if (employeeEvents.length === 0) return;

  // The state before this batch, for employees whose batch does not start with their hire.
  const known = [...firstRevision.values()].filter((s) => s.revision > 0);
  const streams = new Map<string, { applied: number; state: EmployeeState }>();
  if (known.length > 0) {
    const rows = await tx.any(sql.type(lastStateRow)`
      select distinct on (c.tenant_id, c.employee_id) c.tenant_id::text, c.employee_id, c.revision, c.employee, c.role_id
      from ${tables.employee_changes} c
      join unnest(${sql.array(
        known.map((k) => k.tenantId),
        'uuid',
      )}, ${sql.array(
        known.map((k) => k.employeeId),
        'text',
      )}) as k(tenant_id, employee_id)
        on c.tenant_id = k.tenant_id and c.employee_id = k.employee_id
      order by c.tenant_id, c.employee_id, c.revision desc
    `);
    for (const row of rows) {
      const view = employeeView.parse(row.employee);
      // The feed shows views only; when the status took effect is not part of them and not read here.
      const state: EmployeeState = { kind: 'hired', ...view, roleId: row.role_id, statusSince: view.hiredAt };
      streams.set(key(row.tenant_id, row.employee_id), { applied: row.revision, state });
    }
  }

  const out: ChangeRow[] = [];
  for (const { recorded, k, tenantId, employeeId } of employeeEvents) {
    const stream = streams.get(k) ?? { applied: -1, state: { kind: 'none' } };
    streams.set(k, stream);
    if (recorded.revision <= stream.applied) continue; // applied by an earlier batch
    // The store hands back what the write side stored for these types (contract.ts).
    const event = { type: recorded.type, data: recorded.data } as EmployeeEvent;
    stream.state = evolve(stream.state, event);
    if (stream.state.kind !== 'hired') continue; // a change to an employee never hired: nothing to show
    const occurredAt = typeof recorded.metadata.occurredAt === 'string' ? recorded.metadata.occurredAt : recorded.recordedAt;
    out.push({
      tenantId,
      commit: recorded.position.commit.toString(),
      prepare: recorded.position.prepare.toString(),
      employeeId,
      revision: recorded.revision,
      type: CHANGE_TYPES[event.type],
      occurredAt,
      employee: JSON.stringify(toEmployeeView(stream.state)),
      roleId: stream.state.roleId,
    });
  }
  if (out.length === 0) return;
  // The NOTIFY is delivered at commit (and only if it commits): it wakes feed long-polls and
  // webhook dispatch, one per batch and tenant, not per event. One statement with the insert (a
  // data-modifying WITH runs to completion whether or not it is read): one round trip less.
  const tenants = [...new Set(out.map((r) => r.tenantId))];
  await tx.query(sql.type(z.object({}))`
    with inserted as (
      insert into ${tables.employee_changes}
        (tenant_id, commit_position, prepare_position, employee_id, revision, type, occurred_at, employee, role_id)
      select u.tenant_id, u.commit_position, u.prepare_position, u.employee_id, u.revision, u.type, u.occurred_at, u.employee, u.role_id
      from ${sql.unnest(
        out.map((r) => [r.tenantId, r.commit, r.prepare, r.employeeId, r.revision, r.type, r.occurredAt, r.employee, r.roleId]),
        ['uuid', 'numeric', 'numeric', 'text', 'int4', 'text', 'timestamptz', 'jsonb', 'text'],
      )} with ordinality as u(tenant_id, commit_position, prepare_position, employee_id, revision, type, occurred_at, employee, role_id, n)
      order by u.n
      on conflict do nothing
    )
    select pg_notify(${CHANGES_CHANNEL}, t) from unnest(${sql.array(tenants, 'text')}) as t
  `);
}

export const changesProjection = defineProjection({
  name: CHANGES_PROJECTION,
  // Version 2 added `seq` (apply order), which the feed pages by.
  version: 2,
  eventTypes: EMPLOYEE_EVENT_TYPES,
  tables: {
    employee_changes: (table, named) => [
      sql.fragment`create table ${table} (
        tenant_id uuid not null,
        commit_position numeric(20, 0) not null,
        prepare_position numeric(20, 0) not null,
        employee_id text not null,
        revision integer not null,
        type text not null,
        occurred_at timestamptz not null,
        employee jsonb not null,
        role_id text,
        seq bigint generated always as identity,
        constraint ${named('pkey')} primary key (tenant_id, commit_position, prepare_position)
      )`,
      sql.fragment`create index ${named('employee')} on ${table} (tenant_id, employee_id, revision desc)`,
      sql.fragment`create unique index ${named('seq')} on ${table} (tenant_id, seq)`,
      ...tenantPolicy(table, named),
    ],
  },
  handle,
});
