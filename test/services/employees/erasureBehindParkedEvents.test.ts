import { randomUUID } from 'node:crypto';
import { monotonicFactory } from 'ulid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import type { IdentifierSqlToken } from 'slonik';
import { z } from 'zod';
import { sql, withTenant } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { START, type EventStore, type RecordedEvent } from '../../../shared/event-store/port.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { registerParkedEventsMetric } from '../../../shared/projections/monitoring.ts';
import { listParkedEvents, parkEvent, resolveParkedEvents, retryParkedEvents } from '../../../shared/projections/parking.ts';
import type { Projection } from '../../../shared/projections/projection.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { employeesProjection } from '../../../projections/employees/employeesProjection.ts';
import { listEmployees } from '../../../projections/employees/queries.ts';
import { workforceProjection } from '../../../projections/workforce/workforceProjection.ts';
import { listRoles } from '../../../services/auth/roles.ts';
import { roleAssignmentReactor } from '../../../services/auth/roleAssignmentReactor.ts';
import { createUser } from '../../../services/auth/users.ts';
import { erasurePorts } from '../../../services/employees/capability.ts';
import { hireEmployee } from '../../../services/employees/commands.ts';
import { employeeStreamId } from '../../../services/employees/contract.ts';
import { eraseEmployee, type ErasurePorts } from '../../../services/employees/erasure.ts';
import { provisionTenant } from '../../support/auth.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { runOps } from '../../support/processes.ts';
import { sealedEventStore, testEmailHash } from '../../support/personalData.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * A projection that parked one of a person's events parks every later event of their stream
 * behind it, their erasure too: the person stays in its model until an operator applies the
 * parked events (`projections retry`) or gives up on the one that blocks them (`resolve`).
 * Either way the erasure must then take effect there, nothing of the person left behind.
 */
const nextId = monotonicFactory();
let db: TestDatabase;
let store: EventStore;
let ports: ErasurePorts;
/** Events the deployed projections cannot apply: a bug, which the operator may fix before a retry. */
const broken = new Set<string>();
const projectors: ProjectorHandle[] = [];

/** `projection` with the bug: it throws on the events of `broken`. */
function withBug<T extends string>(projection: Projection<T>): Projection<T> {
  return {
    ...projection,
    async handle(tx, events, tables) {
      const bad = events.find((e) => broken.has(e.id));
      if (bad) throw new Error(`${projection.name} cannot apply ${bad.type} ${bad.id}`);
      await projection.handle(tx, events, tables);
    },
  };
}

const models: readonly Projection[] = [employeesProjection, workforceProjection];

beforeAll(async () => {
  db = await createTestDatabase();
  const log = createPostgresEventStore(db.pool, { listenUrl: db.url });
  const sealed = sealedEventStore(log, db.pool);
  store = sealed.store;
  ports = erasurePorts({ store, log, pool: db.pool, emailHash: testEmailHash, dataKeys: sealed.keys, logInDatabase: true });
  for (const projection of models) {
    projectors.push(
      runProjection(db.pool, store, withBug(projection), { pollIntervalMs: 50, isolation: { maxAttempts: 1, backoffMs: 0 } }),
    );
    if (!(await waitForCheckpoint(db.pool, projection.name, START, 20_000))) throw new Error(`${projection.name} was not built`);
  }
});
afterAll(async () => {
  for (const projector of projectors) await projector.stop();
  await store?.close();
  await db?.drop();
});

const metadata = (tenantId: string) => ({ tenantId, actor: 'spec', now: new Date().toISOString() });

type Person = { readonly tenantId: string; readonly employeeId: string; readonly streamId: string; readonly email: string };

/** A person hired in a fresh tenant, in both models. */
async function hired(): Promise<Person> {
  const { tenantId } = await provisionTenant(db.pool);
  const employeeId = nextId();
  const email = `${employeeId.toLowerCase()}@behind.test`;
  await hireEmployee(
    { store, emailHash: testEmailHash, assertRoleExists: async () => undefined },
    {
      type: 'HireEmployee',
      data: { employeeId, email, firstName: 'Ingrid', lastName: 'Parkhurst', department: 'eng' },
      metadata: metadata(tenantId),
    },
  );
  await waitFor(async () => (await listed(tenantId)).includes(employeeId), 20_000, 'the hire listed');
  return { tenantId, employeeId, streamId: employeeStreamId(tenantId, employeeId), email };
}

/** Appends `type` with `data` to the person's stream as an event both deployed projections fail on. */
async function poison(person: Person, type: string, data: Record<string, unknown>): Promise<string> {
  const id = randomUUID();
  broken.add(id);
  await store.append(person.streamId, [
    { id, type, data: { employeeId: person.employeeId, ...data }, metadata: { tenantId: person.tenantId, actor: 'spec' } },
  ]);
  return id;
}

const listed = async (tenantId: string) => (await listEmployees(db.pool, tenantId, { page: 1, limit: 100 })).data.map((e) => e.id);

/** The ids of the list model's rows of the tenant, as the projection left them (analysts read these). */
const modelRows = (tenantId: string) =>
  db.pool.anyFirst(sql.type(z.object({ id: z.string() }))`select id from employees where tenant_id = ${tenantId} order by id`);

/** The parked events of the person's stream in `projection`, once `count` of them are parked. */
async function parkedOf(projection: string, person: Person, count: number): Promise<RecordedEvent[]> {
  return waitFor(
    async () => {
      const parked = (await listParkedEvents(db.pool, projection, { status: 'parked' })).filter(
        (p) => p.event.streamId === person.streamId,
      );
      return parked.length === count && parked.map((p) => p.event);
    },
    20_000,
    `${count} event(s) of the person parked in ${projection}`,
  );
}

/** Type and status of each event of the person's stream the projection ever parked, in log order. */
const statusesOf = async (projection: string, person: Person) =>
  (await listParkedEvents(db.pool, projection)).filter((p) => p.event.streamId === person.streamId).map((p) => [p.event.type, p.status]);

const rowsAsText = z.object({ row: z.string() });

/** Every row of the person's tenant in the person's tables of both models, as text. */
async function whatIsLeft(person: Person) {
  const employees = await db.pool.anyFirst(sql.type(rowsAsText)`
    select to_jsonb(e)::text as row from employees e where tenant_id = ${person.tenantId}
  `);
  const versions = await db.pool.any(sql.type(
    z.object({ first_name: z.string().nullable(), last_name: z.string().nullable(), email: z.string().nullable(), erased: z.boolean() }),
  )`
    select first_name, last_name, email, erased from employee_versions where tenant_id = ${person.tenantId} order by valid_from
  `);
  const versionsAsText = await db.pool.anyFirst(sql.type(rowsAsText)`
    select to_jsonb(v)::text as row from employee_versions v where tenant_id = ${person.tenantId}
  `);
  const total = await db.pool.oneFirst(sql.type(z.object({ n: z.number() }))`
    select coalesce(sum(count), 0)::int4 as n from employee_counts where tenant_id = ${person.tenantId}
  `);
  return { employees, versions, total, text: [...employees, ...versionsAsText].join('\n') };
}

/** Nothing personal of the person in either model, and they are in no list; their versions go on counting. */
async function expectErasedEverywhere(person: Person) {
  expect(await listed(person.tenantId)).toEqual([]);
  const left = await whatIsLeft(person);
  expect(left.employees).toEqual([]);
  expect(left.total).toBe(0);
  expect(left.versions.length).toBeGreaterThan(0);
  for (const version of left.versions) expect(version).toEqual({ first_name: null, last_name: null, email: null, erased: true });
  for (const personal of [person.email, 'Ingrid', 'Parkhurst', 'Ingeborg']) expect(left.text).not.toContain(personal);
}

const liveTables = <T extends string>(projection: Projection<T>) =>
  Object.fromEntries(Object.keys(projection.tables).map((t) => [t, sql.identifier([t])])) as Record<T, IdentifierSqlToken>;

describe('when a person is erased while an event of theirs is parked', () => {
  it('parks the erasure behind it; after the fix, `projections retry` applies both and the person is erased in every model', async () => {
    const person = await hired();
    const renamed = await poison(person, 'EmployeeDetailsChanged', { firstName: 'Ingeborg' });
    for (const projection of models) expect((await parkedOf(projection.name, person, 1)).map((e) => e.id)).toEqual([renamed]);

    expect(await eraseEmployee(ports, person.employeeId, metadata(person.tenantId))).toMatchObject({ fresh: true });
    for (const projection of models) {
      const [change, erasure] = await parkedOf(projection.name, person, 2);
      expect(erasure?.type).toBe('EmployeeErased');
      // The parked copy lost the person's fields with the erasure, and is handed back redacted.
      expect(change).toMatchObject({ id: renamed, data: { firstName: null }, redacted: true });
    }
    // Until the parked events are applied, the model still holds the person: what an operator must
    // act on. The API's list leaves them out already (it reads the erasure ledger).
    expect(await modelRows(person.tenantId)).toEqual([person.employeeId]);
    expect(await listed(person.tenantId)).toEqual([]);

    broken.delete(renamed);
    for (const projection of models) {
      await retryParkedEvents(db.pool, projection, liveTables(projection));
      expect(await statusesOf(projection.name, person)).toEqual([
        ['EmployeeDetailsChanged', 'retried'],
        ['EmployeeErased', 'retried'],
      ]);
    }
    await expectErasedEverywhere(person);
  });
});

describe('when the event that blocks the erasure still fails', () => {
  it("leaves both parked, marked as an erased person's; once the blocking event is resolved, a retry applies the erasure", async () => {
    const person = await hired();
    // An event with no personal field: its copy reads the same before and after the erasure.
    const role = await poison(person, 'EmployeeRoleAssigned', { roleId: 'reviewer' });
    for (const projection of models) await parkedOf(projection.name, person, 1);
    await eraseEmployee(ports, person.employeeId, metadata(person.tenantId));
    for (const projection of models) await parkedOf(projection.name, person, 2);

    const deployed = models.map((projection) => withBug(projection));
    for (const projection of deployed) {
      await retryParkedEvents(db.pool, projection, liveTables(projection));
      expect(await statusesOf(projection.name, person)).toEqual([
        ['EmployeeRoleAssigned', 'parked'],
        ['EmployeeErased', 'parked'],
      ]);
    }
    expect(await modelRows(person.tenantId)).toEqual([person.employeeId]);
    // What tells the operator: the gauge, and the parked list marking the events of erased people.
    const registry = new Registry();
    registerParkedEventsMetric(registry, db.pool);
    expect(await registry.metrics()).toContain(`eas_projection_parked_erased_events{projection="${employeesProjection.name}"} 2`);
    const listing = await runOps(db.url, 'projections', 'parked', employeesProjection.name, '--json');
    expect(listing.code, listing.stderr).toBe(0);
    const { parked } = z
      .object({ parked: z.array(z.object({ streamId: z.string(), type: z.string(), erased: z.boolean() })) })
      .parse(JSON.parse(listing.stdout));
    expect(parked.filter((p) => p.streamId === person.streamId)).toEqual([
      { streamId: person.streamId, type: 'EmployeeRoleAssigned', erased: true },
      { streamId: person.streamId, type: 'EmployeeErased', erased: true },
    ]);

    for (const projection of deployed) {
      expect(await resolveParkedEvents(db.pool, projection.name, [role])).toBe(1);
      await retryParkedEvents(db.pool, projection, liveTables(projection));
      expect(await statusesOf(projection.name, person)).toEqual([
        ['EmployeeRoleAssigned', 'resolved'],
        ['EmployeeErased', 'retried'],
      ]);
    }
    await expectErasedEverywhere(person);
  }, 90_000);
});

describe('when a projection parks an event it was handed redacted', () => {
  it('keeps it redacted for a retry, though no erasure recorded its stream', async () => {
    const projection = { name: `handed_redacted_${nextId().toLowerCase()}`, version: 1 };
    const event: RecordedEvent = {
      id: randomUUID(),
      streamId: `employee-${randomUUID()}-${nextId()}`,
      revision: 0,
      type: 'EmployeeHired',
      data: { employeeId: nextId(), email: null, firstName: null, lastName: null },
      metadata: {},
      position: { commit: 1n, prepare: 1n },
      recordedAt: new Date().toISOString(),
      redacted: true,
    };
    await db.pool.transaction((tx) => parkEvent(tx, projection, event, { error: 'cannot apply', attempts: 1 }));
    await db.pool.query(sql.type(z.object({}))`
      insert into projection_checkpoints (name, version, commit_position, prepare_position) values (${projection.name}, ${projection.version}, 1, 1)
    `);
    const [parked] = await listParkedEvents(db.pool, projection.name);
    expect(parked?.event).toMatchObject({ id: event.id, data: event.data, redacted: true });
    expect(parked?.erased).toBe(true);
  });
});

describe("when the role reactor parked a person's role assignment and the person is erased", () => {
  it('gives no role on retry, so the login of the next person at their freed address keeps its own', async () => {
    const reactor = runProjection(db.pool, store, withBug(roleAssignmentReactor), {
      pollIntervalMs: 50,
      isolation: { maxAttempts: 1, backoffMs: 0 },
    });
    try {
      if (!(await waitForCheckpoint(db.pool, roleAssignmentReactor.name, START, 20_000))) throw new Error('the reactor was not built');
      const person = await hired();
      await waitFor(async () => (await addressesKnown(person)) === 1, 20_000, 'the reactor knowing the address');
      const admin = (await withTenant(db.pool, person.tenantId, (tx) => listRoles(tx, person.tenantId))).find((r) => r.name === 'admin');
      if (!admin) throw new Error('no admin role');
      const assigned = await poison(person, 'EmployeeRoleAssigned', { roleId: admin.id });
      expect((await parkedOf(roleAssignmentReactor.name, person, 1)).map((e) => e.id)).toEqual([assigned]);
      await eraseEmployee(ports, person.employeeId, metadata(person.tenantId));
      await parkedOf(roleAssignmentReactor.name, person, 2);

      // The address is free again: someone else is hired there and given a login of their own.
      await hireEmployee(
        { store, emailHash: testEmailHash, assertRoleExists: async () => undefined },
        {
          type: 'HireEmployee',
          data: { employeeId: nextId(), email: person.email, firstName: 'Next', lastName: 'Holder' },
          metadata: metadata(person.tenantId),
        },
      );
      const theirs = await withTenant(db.pool, person.tenantId, (tx) =>
        createUser(tx, { tenantId: person.tenantId, email: person.email, password: 'a password of theirs', role: 'employee' }),
      );

      broken.delete(assigned);
      await retryParkedEvents(db.pool, roleAssignmentReactor, liveTables(roleAssignmentReactor));
      expect(await statusesOf(roleAssignmentReactor.name, person)).toEqual([
        ['EmployeeRoleAssigned', 'retried'],
        ['EmployeeErased', 'retried'],
      ]);
      const login = await withTenant(db.pool, person.tenantId, (tx) =>
        tx.one(sql.type(z.object({ email: z.string(), disabled: z.boolean(), role: z.string() }))`
          select u.email, u.disabled_at is not null as disabled, r.name as role from users u join roles r on r.id = u.role_id where u.id = ${theirs.id}
        `),
      );
      expect(login).toEqual({ email: person.email, disabled: false, role: 'employee' });
    } finally {
      await reactor.stop();
    }
  });
});

/** How many addresses the role reactor keeps for the person. */
const addressesKnown = (person: Person) =>
  db.pool.oneFirst(sql.type(z.object({ n: z.number() }))`
    select count(*)::int as n from role_reactor_emails where tenant_id = ${person.tenantId} and employee_id = ${person.employeeId}
  `);
