import { z } from 'zod';
import type { IdentifierSqlToken } from 'slonik';
import { idRow, ignoredRows, sql, type Queryable } from '../../shared/db/pool.ts';
import type { RecordedEvent } from '../../shared/event-store/port.ts';
import { defineProjection } from '../../shared/projections/projection.ts';
import { EMPLOYEE_EVENT_TYPES, parseEmployeeStreamId, type EmployeeEvent, erasedStreams, PERSONAL_FIELDS } from '../employees/contract.ts';
import { normaliseEmail } from '../../shared/email.ts';
import { forgetAccountsById } from './forgetAccount.ts';
import { redactParkedEvents } from '../../shared/projections/parkedRedactions.ts';

/**
 * Role assignment as a reaction to the employee's events. An employee's
 * `EmployeeRoleAssigned` (on hire with a `roleId`, or `PUT /v1/employees/{id}/role`) is the
 * decision; this reactor carries it to where roles are enforced, `users.role_id` (the one source
 * of truth for a person's role, docs/rbac.md). It runs on the projection runner, so the user
 * update and the checkpoint commit in one transaction: a failure (database down, a lock timeout)
 * rolls both back and the runner retries the page; a success is never applied twice. Applying is
 * idempotent anyway (`applyRoleAssignment` ignores a decision older than the user's current
 * role), so a replay of the whole log changes nothing.
 *
 * The person is found by e-mail at the time of the assignment, so the reactor keeps each
 * employee's current address (from `EmployeeHired` / `EmployeeEmailChanged`) in its own table.
 * Named `employees-roles` so that `projector employees` runs it beside the employees projection.
 *
 * It also keeps which logins it gave each employee a role on (`role_reactor_logins`, user ids
 * only): an erasure forgets exactly those, whatever address the person had when they got the
 * role. On `EmployeeErased` it forgets them itself too, and drops assignments of the person still
 * queued in the same page, so a reactor that was behind (stopped, restarted) never gives a role,
 * or an account, to an erased person's address.
 */
export const ROLE_ASSIGNMENTS_PROJECTION = 'employees-roles';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

type Key = `${string}/${string}`;
const keyOf = (tenantId: string, employeeId: string): Key => `${tenantId}/${employeeId}`;

const emailRow = z.object({ tenant_id: z.string(), employee_id: z.string(), email: z.string() });

const decidedAt = (event: RecordedEvent): string =>
  typeof event.metadata.occurredAt === 'string' && !Number.isNaN(Date.parse(event.metadata.occurredAt))
    ? event.metadata.occurredAt
    : event.recordedAt;

/** The reactor's table of the logins it gave roles, as the live model names it (read by an erasure). */
export const ROLE_REACTOR_LOGINS = sql.identifier(['role_reactor_logins']);

const madeRow = z.object({ made: z.boolean() });
const userIdRow = z.object({ user_id: z.string() });

/**
 * The logins the reactor gave an erased employee a role on, forgotten in `tx` (the person's tenant
 * set). Nothing when the reactor has not made its table yet (it then has given nobody a role).
 */
export async function forgetEmployeeLogins(
  tx: Queryable,
  table: IdentifierSqlToken,
  tenantId: string,
  employeeIds: readonly string[],
): Promise<number> {
  const made = await tx.oneFirst(sql.type(madeRow)`select to_regclass(${table.names.join('.')}) is not null as made`);
  if (!made) return 0;
  const ids = await tx.anyFirst(sql.type(userIdRow)`
    delete from ${table} where tenant_id = ${tenantId} and employee_id = any(${sql.array([...employeeIds], 'text')})
    returning user_id::text
  `);
  return forgetAccountsById(tx, tenantId, [...new Set(ids)]);
}

export const roleAssignmentReactor = defineProjection({
  name: ROLE_ASSIGNMENTS_PROJECTION,
  // 2: `role_reactor_logins`, filled by a rebuild from the assignments in the log.
  version: 2,
  // Every employee event, though only hires, address changes and assignments matter: the
  // projections beside it in `projector employees` read the same pages, so the store reads
  // each page once for all three (shared subscription pages, event-store/postgres/sharedTail.ts).
  eventTypes: EMPLOYEE_EVENT_TYPES,
  tables: {
    role_reactor_emails: (table) => [
      sql.fragment`create table ${table} (
        tenant_id uuid not null,
        employee_id text not null,
        email text not null,
        primary key (tenant_id, employee_id)
      )`,
    ],
    role_reactor_logins: (table) => [
      sql.fragment`create table ${table} (
        tenant_id uuid not null,
        employee_id text not null,
        user_id uuid not null,
        primary key (tenant_id, employee_id, user_id)
      )`,
    ],
  },
  async handle(tx: Queryable, events: readonly RecordedEvent[], tables) {
    await redactParkedEvents(tx, erasedStreams(events), PERSONAL_FIELDS);
    // Set-wise for addresses (hires are the bulk of the log), one statement per assignment (rare).
    const emails = new Map<Key, { tenantId: string; employeeId: string; email: string }>();
    const changed = new Set<Key>();
    const missing = new Set<Key>();
    const forgotten = new Set<Key>();
    const parsed = events.flatMap((recorded) => {
      const stream = parseEmployeeStreamId(recorded.streamId);
      if (!stream) return [];
      // The store hands back what the decider's own events serialised to; this is that boundary.
      const event = { type: recorded.type, data: recorded.data } as EmployeeEvent;
      return [{ recorded, event, ...stream, key: keyOf(stream.tenantId, stream.employeeId) }];
    });
    // Only an assignment made before the batch gives the employee an address needs a lookup.
    const addressedInBatch = new Set<Key>();
    for (const { event, key } of parsed) {
      if (event.type === 'EmployeeHired' || event.type === 'EmployeeEmailChanged') addressedInBatch.add(key);
      else if (event.type === 'EmployeeRoleAssigned' && !addressedInBatch.has(key)) missing.add(key);
    }
    if (missing.size > 0) {
      const wanted = [...missing].map((k) => k.split('/'));
      const rows = await tx.any(sql.type(emailRow)`
        select tenant_id::text, employee_id, email from ${tables.role_reactor_emails}
        where (tenant_id, employee_id) in (
          select * from unnest(${sql.array(
            wanted.map(([t]) => t ?? ''),
            'uuid',
          )}::uuid[], ${sql.array(
            wanted.map(([, e]) => e ?? ''),
            'text',
          )}::text[])
        )
      `);
      for (const row of rows)
        emails.set(keyOf(row.tenant_id, row.employee_id), { tenantId: row.tenant_id, employeeId: row.employee_id, email: row.email });
    }

    const assignments: Array<{ tenantId: string; employeeId: string; key: Key; email: string; roleId: string; decidedAt: string }> = [];
    const erased = new Set<Key>();
    for (const { recorded, event, tenantId, employeeId, key } of parsed) {
      switch (event.type) {
        case 'EmployeeHired':
        case 'EmployeeEmailChanged':
          // An address that cannot be opened any more (the person is erased) is not kept, and no role goes to it.
          if (recorded.redacted) {
            emails.delete(key);
            changed.delete(key);
            forgotten.add(key);
            break;
          }
          emails.set(key, { tenantId, employeeId, email: event.data.email });
          changed.add(key);
          break;
        case 'EmployeeRoleAssigned': {
          // A person erased from here on (a retried parked event of theirs) is given no role: the
          // address still known for them may be someone else's by now.
          if (recorded.redacted) break;
          const person = emails.get(key);
          // No known address (an employee stream without its hire) or a malformed id: nothing to apply.
          if (person && UUID.test(event.data.roleId)) {
            assignments.push({ tenantId, employeeId, key, email: person.email, roleId: event.data.roleId, decidedAt: decidedAt(recorded) });
          }
          break;
        }
        case 'EmployeeErased':
          // The address is personal: this table forgets it with the person.
          emails.delete(key);
          changed.delete(key);
          forgotten.add(key);
          erased.add(key);
          break;
        case 'EmployeeDetailsChanged':
        case 'EmployeeStatusChanged':
          break;
        default: {
          const unhandled: never = event;
          throw new Error(`unhandled event ${JSON.stringify(unhandled)}`);
        }
      }
    }

    if (changed.size > 0) {
      const rows = [...changed].flatMap((k) => {
        const row = emails.get(k);
        return row ? [row] : [];
      });
      await tx.query(sql.type(ignoredRows)`
        insert into ${tables.role_reactor_emails} (tenant_id, employee_id, email)
        select * from unnest(
          ${sql.array(
            rows.map((r) => r.tenantId),
            'uuid',
          )}::uuid[],
          ${sql.array(
            rows.map((r) => r.employeeId),
            'text',
          )}::text[],
          ${sql.array(
            rows.map((r) => r.email),
            'text',
          )}::text[]
        )
        on conflict (tenant_id, employee_id) do update set email = excluded.email
      `);
    }

    if (forgotten.size > 0) {
      const gone = [...forgotten].map((k) => k.split('/'));
      await tx.query(sql.type(ignoredRows)`
        delete from ${tables.role_reactor_emails}
        where (tenant_id, employee_id) in (
          select * from unnest(${sql.array(
            gone.map(([t]) => t ?? ''),
            'uuid',
          )}::uuid[], ${sql.array(
            gone.map(([, e]) => e ?? ''),
            'text',
          )}::text[])
        )
      `);
    }

    // users is tenant-scoped by row-level security: scope each statement to the event's tenant.
    const inTenant = (tenantId: string) => tx.query(sql.type(ignoredRows)`select set_config('app.tenant_id', ${tenantId}, true)`);
    // An assignment of a person erased later in this page would hand their address a role (and
    // make an account for it) after the erasure forgot it: dropped.
    for (const assignment of assignments.filter((a) => !erased.has(a.key))) {
      await inTenant(assignment.tenantId);
      const userId = await applyRoleAssignment(tx, assignment);
      if (userId !== null)
        await tx.query(sql.type(ignoredRows)`
          insert into ${tables.role_reactor_logins} (tenant_id, employee_id, user_id)
          values (${assignment.tenantId}, ${assignment.employeeId}, ${userId}) on conflict do nothing
        `);
    }
    const erasedByTenant = new Map<string, string[]>();
    for (const { tenantId, employeeId, key } of parsed)
      if (erased.has(key) && !erasedByTenant.get(tenantId)?.includes(employeeId))
        erasedByTenant.set(tenantId, [...(erasedByTenant.get(tenantId) ?? []), employeeId]);
    for (const [tenantId, employeeIds] of erasedByTenant) {
      await inTenant(tenantId);
      await forgetEmployeeLogins(tx, tables.role_reactor_logins, tenantId, employeeIds);
    }
  },
});

/**
 * Gives the person with `email` the role `roleId`, as decided at `decidedAt` (the reaction to an
 * employee's `EmployeeRoleAssigned`, services/auth/roleAssignmentReactor.ts): updates the user's
 * role, or creates an account without a password that holds the role until one is set
 * (`ops users create`). Idempotent, and never undoes a later decision: a user whose role was set
 * after `decidedAt` (by a later event, the ops CLI or a new password+role) is left alone, so
 * applying the same event twice, or replaying old ones, changes nothing. A role that no longer
 * exists (tenant deleted) assigns nothing. Returns the id of the login at the address (written, or
 * left alone for a later decision: the person's login either way), null when the role does not
 * exist. Lives here, not in users.ts, so that projector processes do not load argon2 for it.
 */
export async function applyRoleAssignment(
  tx: Queryable,
  input: { tenantId: string; email: string; roleId: string; decidedAt: string },
): Promise<string | null> {
  const key = normaliseEmail(input.email);
  return tx.maybeOneFirst(sql.type(idRow)`
    with role as (
      select r.id, r.tenant_id from roles r where r.id = ${input.roleId}::uuid and r.tenant_id = ${input.tenantId}::uuid
    ), written as (
      insert into users (tenant_id, email, email_key, role_id, role_set_at)
      select role.tenant_id, ${input.email}, ${key}, role.id, ${input.decidedAt}::timestamptz from role
      on conflict (tenant_id, email_key) do update
        set role_id = excluded.role_id, role_set_at = excluded.role_set_at, updated_at = now()
        where users.role_set_at is null or users.role_set_at <= excluded.role_set_at
      returning id
    )
    select id::text from written
    union all
    select u.id::text from users u, role
    where u.tenant_id = ${input.tenantId}::uuid and u.email_key = ${key} and not exists (select 1 from written)
    limit 1
  `);
}
