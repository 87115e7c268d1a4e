import { z } from 'zod';
import type { IdentifierSqlToken } from 'slonik';
import { ignoredRows, sql, type Queryable } from '../../shared/db/pool.ts';
import { tenantScopedTable } from '../../shared/db/rowLevelSecurity.ts';
import type { RecordedEvent } from '../../shared/event-store/port.ts';
import { defineProjection } from '../../shared/projections/projection.ts';
import {
  EMPLOYEE_EVENT_TYPES,
  EMPLOYEE_STATUSES,
  employeeKey,
  employeeOf,
  type EmployeeEvent,
  type EmployeeEventType,
  evolve,
  toEmployeeView,
  toErasedView,
  BLANK_PERSONAL_VIEW_FIELDS,
  type EmployeeState,
  erasedStreams,
  PERSONAL_FIELDS,
} from '../../services/employees/contract.ts';
import { redactParkedEvents } from '../../shared/projections/parkedRedactions.ts';
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
  EmployeeErased: 'employee.erased',
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
  type: z.string(),
  occurred_at: z.string(),
  status_since: z.string(),
});

/**
 * The employee as a change carries it (stored with the change, read back by the feed). The
 * personal fields are null in every change of an employee who was erased since.
 */
export const employeeView = z.object({
  id: z.string(),
  email: z.string().nullable(),
  firstName: z.string().nullable(),
  lastName: z.string().nullable(),
  department: z.string().nullable(),
  status: z.enum(EMPLOYEE_STATUSES),
  hiredAt: z.string(),
});
export type EmployeeView = z.infer<typeof employeeView>;

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
  statusSince: string;
};

async function handle(
  tx: Queryable,
  events: readonly RecordedEvent[],
  tables: Readonly<Record<'employee_changes', IdentifierSqlToken>>,
): Promise<void> {
  await redactParkedEvents(tx, erasedStreams(events), PERSONAL_FIELDS);
  // The batch's employee events, each with its stream, in the batch's (log) order: the rows are
  // inserted in that order and draw their `seq` from it (`order by u.n` below).
  const employeeEvents: Array<{ recorded: RecordedEvent; k: string; tenantId: string; employeeId: string }> = [];
  const firstRevision = new Map<string, { tenantId: string; employeeId: string; revision: number }>();
  for (const recorded of events) {
    const parsed = employeeOf(recorded);
    if (!parsed) continue;
    const k = employeeKey(parsed.tenantId, parsed.employeeId);
    employeeEvents.push({ recorded, k, ...parsed });
    if (!firstRevision.has(k)) firstRevision.set(k, { ...parsed, revision: recorded.revision });
  }
  if (employeeEvents.length === 0) return;

  // The state before this batch, for employees whose batch does not start with their hire.
  const known = [...firstRevision.values()].filter((s) => s.revision > 0);
  const streams = new Map<string, { applied: number; state: EmployeeState }>();
  if (known.length > 0) {
    const rows = await tx.any(sql.type(lastStateRow)`
      select distinct on (c.tenant_id, c.employee_id) c.tenant_id::text, c.employee_id, c.revision, c.employee, c.role_id, c.type,
        to_char(c.occurred_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as occurred_at, c.status_since
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
      // A back-dated status change becomes the current status only if it is not older than the
      // status in force: the fold needs when that took effect, which the view does not carry.
      const { email, firstName, lastName, ...facts } = employeeView.parse(row.employee);
      // Personal fields read null once the person is erased, in the rows before the erasure too
      // (a rebuild after it could not open them): the state they carry on is still hired, with the
      // fields as the sealing boundary hands them over (null), so the changes up to the erasure keep their rows.
      const personal = { email, firstName, lastName } as Pick<
        Extract<EmployeeState, { kind: 'hired' }>,
        'email' | 'firstName' | 'lastName'
      >;
      const state: EmployeeState =
        row.type === CHANGE_TYPES.EmployeeErased
          ? { kind: 'erased', ...facts, statusSince: row.status_since, erasedAt: row.occurred_at }
          : { kind: 'hired', ...facts, ...personal, roleId: row.role_id, statusSince: row.status_since };
      streams.set(employeeKey(row.tenant_id, row.employee_id), { applied: row.revision, state });
    }
  }

  const out: ChangeRow[] = [];
  const erased: Array<{ tenantId: string; employeeId: string }> = [];
  for (const { recorded, k, tenantId, employeeId } of employeeEvents) {
    const stream = streams.get(k) ?? { applied: -1, state: { kind: 'none' } };
    streams.set(k, stream);
    if (recorded.revision <= stream.applied) continue; // applied by an earlier batch
    // The store hands back what the write side stored for these types (contract.ts).
    const event = { type: recorded.type, data: recorded.data } as EmployeeEvent;
    const before = stream.state;
    stream.state = evolve(before, event);
    // Read after the person's key was destroyed, the event opens with its own personal fields
    // null, but the fold would still carry the others from earlier rows into its row: none of
    // them may be written again (the erasure's blanking below looks for any of them).
    if (recorded.redacted && stream.state.kind === 'hired') stream.state = { ...stream.state, ...NO_PERSONAL_FIELDS };
    if (stream.state.kind === 'erased') {
      if (before.kind !== 'hired') continue;
      // The erasure itself is a change (integrators erase their copies on it); every earlier
      // change of the employee loses its personal fields below.
      erased.push({ tenantId, employeeId });
      out.push({
        tenantId,
        commit: recorded.position.commit.toString(),
        prepare: recorded.position.prepare.toString(),
        employeeId,
        revision: recorded.revision,
        type: CHANGE_TYPES.EmployeeErased,
        occurredAt: stream.state.erasedAt,
        employee: JSON.stringify(toErasedView(stream.state)),
        roleId: null,
        statusSince: stream.state.statusSince,
      });
      continue;
    }
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
      statusSince: stream.state.statusSince,
    });
  }
  if (out.length === 0) return;
  // The NOTIFY is delivered at commit (and only if it commits): it wakes feed long-polls and
  // webhook dispatch, one per batch and tenant, not per event. One statement with the insert (a
  // data-modifying WITH runs to completion whether or not it is read): one round trip less.
  const tenants = [...new Set(out.map((r) => r.tenantId))];
  await tx.query(sql.type(ignoredRows)`
    with inserted as (
      insert into ${tables.employee_changes}
        (tenant_id, commit_position, prepare_position, employee_id, revision, type, occurred_at, employee, role_id, status_since)
      select u.tenant_id, u.commit_position, u.prepare_position, u.employee_id, u.revision, u.type, u.occurred_at, u.employee, u.role_id,
             u.status_since
      from ${sql.unnest(
        out.map((r) => [
          r.tenantId,
          r.commit,
          r.prepare,
          r.employeeId,
          r.revision,
          r.type,
          r.occurredAt,
          r.employee,
          r.roleId,
          r.statusSince,
        ]),
        ['uuid', 'numeric', 'numeric', 'text', 'int4', 'text', 'timestamptz', 'jsonb', 'text', 'timestamptz'],
      )} with ordinality as u(tenant_id, commit_position, prepare_position, employee_id, revision, type, occurred_at, employee, role_id, status_since, n)
      order by u.n
      on conflict do nothing
    )
    select pg_notify(${CHANGES_CHANNEL}, t) from unnest(${sql.array(tenants, 'text')}) as t
  `);
  if (erased.length > 0) await redactChanges(tx, tables.employee_changes, erased);
}

const REDACTED = JSON.stringify(BLANK_PERSONAL_VIEW_FIELDS);
// The hired state's personal fields as an erased person's events hand them over: null.
const NO_PERSONAL_FIELDS = BLANK_PERSONAL_VIEW_FIELDS as unknown as Pick<
  Extract<EmployeeState, { kind: 'hired' }>,
  keyof typeof BLANK_PERSONAL_VIEW_FIELDS
>;

/**
 * Blanks the personal fields of every change of these employees, those of this batch included:
 * after an erasure the feed (and the webhook deliveries read from it, retries and replays
 * alike) carries nothing personal about them. A rebuild meets the erasure again and does the same.
 */
async function redactChanges(
  tx: Queryable,
  table: IdentifierSqlToken,
  employees: ReadonlyArray<{ tenantId: string; employeeId: string }>,
): Promise<void> {
  await tx.query(sql.type(ignoredRows)`
    update ${table} c set employee = c.employee || ${REDACTED}::jsonb
    from unnest(${sql.array(
      employees.map((e) => e.tenantId),
      'uuid',
    )}, ${sql.array(
      employees.map((e) => e.employeeId),
      'text',
    )}) as k(tenant_id, employee_id)
    where c.tenant_id = k.tenant_id and c.employee_id = k.employee_id and not c.employee @> ${REDACTED}::jsonb
  `);
}

export const changesProjection = defineProjection({
  name: CHANGES_PROJECTION,
  // Version 2 added `seq` (apply order), which the feed pages by; 3 `status_since`, which the
  // fold of a back-dated status change needs; 4 rebuilds feeds where a change applied after its
  // person's erasure kept the names the fold carried.
  version: 4,
  eventTypes: EMPLOYEE_EVENT_TYPES,
  // Each row is a cursor a client may store and hand back: a page a reader has seen must survive
  // a database crash, or the feed would answer that cursor as unknown until the page came back.
  durablePages: true,
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
        status_since timestamptz not null,
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
