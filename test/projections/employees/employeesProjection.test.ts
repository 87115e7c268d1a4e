import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { monotonicFactory } from 'ulid';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { sql, withTenant } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { employeesProjection } from '../../../projections/employees/employeesProjection.ts';
import { listEmployees } from '../../../projections/employees/queries.ts';
import { employeeStreamId, type EmployeeEvent } from '../../../services/employees/contract.ts';

let db: TestDatabase;
let store: EventStore;
let projector: ProjectorHandle;
const nextId = monotonicFactory();

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  projector = runProjection(db.pool, store, employeesProjection, {
    pollIntervalMs: 50,
    onError: (error) => console.error('projector', error),
  });
});
afterAll(async () => {
  await projector?.stop();
  await store?.close();
  await db?.drop();
});

/** Given these events on an employee's stream; resolves once the projection has applied them. */
async function given(tenantId: string, employeeId: string, events: EmployeeEvent[]) {
  const result = await store.append(
    employeeStreamId(tenantId, employeeId),
    events.map((e) => ({ id: randomUUID(), ...e, metadata: { tenantId, actor: 'spec', occurredAt: '2025-01-01T00:00:00.000Z' } })),
  );
  expect(await waitForCheckpoint(db.pool, employeesProjection.name, result.position, 10_000)).toBe(true);
}

const hiredEvent = (employeeId: string, over: Partial<Extract<EmployeeEvent, { type: 'EmployeeHired' }>['data']> = {}): EmployeeEvent => ({
  type: 'EmployeeHired',
  data: {
    employeeId,
    email: `${employeeId.toLowerCase()}@example.test`,
    firstName: 'F',
    lastName: 'L',
    department: 'sales',
    status: 'active',
    hiredAt: '2024-01-01T00:00:00.000Z',
    ...over,
  },
});

const counters = (tenantId: string) =>
  withTenant(db.pool, tenantId, (tx) =>
    tx.any(sql.type(z.object({ status: z.string(), department: z.string(), count: z.number() }))`
      select status, department, count from employee_counts where count <> 0 order by status, department
    `),
  );

const rowCount = (tenantId: string) =>
  withTenant(db.pool, tenantId, (tx) => tx.oneFirst(sql.type(z.object({ n: z.number() }))`select count(*) as n from employees`));

describe('when an employee is hired', () => {
  it('adds a row with the stream revision and counts it', async () => {
    const tenantId = randomUUID();
    const id = nextId();
    await given(tenantId, id, [hiredEvent(id), { type: 'EmployeeRoleAssigned', data: { employeeId: id, roleId: randomUUID() } }]);
    const page = await listEmployees(db.pool, tenantId, { page: 1, limit: 10 });
    expect(page.data).toEqual([
      {
        id,
        email: `${id.toLowerCase()}@example.test`,
        firstName: 'F',
        lastName: 'L',
        department: 'sales',
        status: 'active',
        hiredAt: '2024-01-01T00:00:00.000Z',
        revision: 1,
      },
    ]);
    expect(page.total).toBe(1);
    expect(await counters(tenantId)).toEqual([{ status: 'active', department: 'sales', count: 1 }]);
  });
});

describe('when details, email and status change', () => {
  it('updates the row and moves the counters', async () => {
    const tenantId = randomUUID();
    const id = nextId();
    await given(tenantId, id, [hiredEvent(id, { department: null })]);
    await given(tenantId, id, [
      { type: 'EmployeeDetailsChanged', data: { employeeId: id, firstName: 'G', department: 'research' } },
      { type: 'EmployeeEmailChanged', data: { employeeId: id, email: 'new@example.test', previousEmail: 'x' } },
      {
        type: 'EmployeeStatusChanged',
        data: { employeeId: id, from: 'active', to: 'on_leave', reason: null, changedAt: '2025-01-01T00:00:00.000Z' },
      },
    ]);
    const page = await listEmployees(db.pool, tenantId, { page: 1, limit: 10 });
    expect(page.data[0]).toMatchObject({
      firstName: 'G',
      department: 'research',
      email: 'new@example.test',
      status: 'on_leave',
      revision: 3,
    });
    expect(await counters(tenantId)).toEqual([{ status: 'on_leave', department: 'research', count: 1 }]);
    expect((await listEmployees(db.pool, tenantId, { page: 1, limit: 10, status: 'on_leave', department: 'research' })).total).toBe(1);
    expect((await listEmployees(db.pool, tenantId, { page: 1, limit: 10, status: 'active' })).total).toBe(0);
  });
});

describe('when a batch is applied twice', () => {
  it('changes nothing the second time (idempotent by revision)', async () => {
    const tenantId = randomUUID();
    const id = nextId();
    await given(tenantId, id, [hiredEvent(id)]);
    const events = await store.readStream(employeeStreamId(tenantId, id));
    await db.pool.transaction((tx) =>
      employeesProjection.handle(tx, events, {
        employees: sql.identifier(['employees']),
        employee_counts: sql.identifier(['employee_counts']),
        employee_month_counts: sql.identifier(['employee_month_counts']),
        employee_day_counts: sql.identifier(['employee_day_counts']),
      }),
    );
    expect(await rowCount(tenantId)).toBe(1);
    expect(await counters(tenantId)).toEqual([{ status: 'active', department: 'sales', count: 1 }]);
  });
});

describe('row-level security', () => {
  it('shows a tenant only its own rows, even without a tenant filter', async () => {
    const a = randomUUID();
    const b = randomUUID();
    const idA = nextId();
    const idB = nextId();
    await given(a, idA, [hiredEvent(idA)]);
    await given(b, idB, [hiredEvent(idB)]);
    expect(await rowCount(a)).toBe(1);
    expect(await rowCount(b)).toBe(1);
  });
});

describe('when the projection is replayed', () => {
  it('rebuilds the same rows and counters into a shadow table and swaps it in', async () => {
    const tenantId = randomUUID();
    for (let i = 0; i < 30; i++) {
      const id = nextId();
      const events: EmployeeEvent[] = [
        hiredEvent(id, { department: i % 2 ? 'sales' : 'ops', hiredAt: new Date(Date.UTC(2024, 0, 1 + i)).toISOString() }),
      ];
      if (i % 3 === 0)
        events.push({
          type: 'EmployeeStatusChanged',
          data: { employeeId: id, from: 'active', to: 'inactive', reason: null, changedAt: '2025-01-01T00:00:00.000Z' },
        });
      await given(tenantId, id, events);
    }
    const before = await listEmployees(db.pool, tenantId, { page: 1, limit: 100 });
    const countersBefore = await counters(tenantId);
    const progress: number[] = [];
    await replayProjection(db.pool, store, employeesProjection, { batchSize: 7, onProgress: (p) => progress.push(p.processed) });
    expect(progress.length).toBeGreaterThan(1);
    expect(await listEmployees(db.pool, tenantId, { page: 1, limit: 100 })).toEqual(before);
    expect(await counters(tenantId)).toEqual(countersBefore);
    // The live projector keeps following after the swap.
    const id = nextId();
    await given(tenantId, id, [hiredEvent(id)]);
    expect((await listEmployees(db.pool, tenantId, { page: 1, limit: 100 })).total).toBe(31);
  });
});
