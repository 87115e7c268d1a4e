import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { monotonicFactory } from 'ulid';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { sealedEventStore } from '../../support/personalData.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore, GlobalPosition } from '../../../shared/event-store/port.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { employeesProjection } from '../../../projections/employees/employeesProjection.ts';
import { employeesModelChecksums } from '../../../projections/employees/checksums.ts';
import { listEmployees } from '../../../projections/employees/queries.ts';
import { employeeStreamId, type EmployeeEvent } from '../../../services/employees/contract.ts';

/**
 * The bulk replay (in-memory fold, multi-row load, indexes after) must build exactly the model
 * that the live projector builds event by event, and that the page-by-page replay builds.
 */
let db: TestDatabase;
let store: EventStore;
let projector: ProjectorHandle;
const nextId = monotonicFactory();
const pageByPage = { ...employeesProjection, bulk: undefined };

beforeAll(async () => {
  db = await createTestDatabase();
  // Behind the sealing boundary: the bulk read opens a page's fields while the next one is read.
  store = sealedEventStore(createPostgresEventStore(db.pool, { listenUrl: db.url }), db.pool).store;
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

const metadata = (tenantId: string) => ({ tenantId, actor: 'spec', occurredAt: '2025-01-01T00:00:00.000Z' });
const append = (tenantId: string, id: string, events: EmployeeEvent[]) =>
  store.append(
    employeeStreamId(tenantId, id),
    events.map((e) => ({ id: randomUUID(), ...e, metadata: metadata(tenantId) })),
  );

/** Every kind of employee event, for several tenants, interleaved across streams (some names hold what COPY escapes). */
async function givenAHistory(tenants: readonly string[], perTenant: number): Promise<GlobalPosition> {
  let last: GlobalPosition | undefined;
  const people: { tenantId: string; id: string }[] = [];
  for (let i = 0; i < perTenant; i++) {
    for (const tenantId of tenants) {
      const id = nextId();
      people.push({ tenantId, id });
      const hiredAt = new Date(Date.UTC(2020 + (i % 5), (i * 7) % 12, 1 + ((i * 13) % 28), i % 24, (i * 17) % 60)).toISOString();
      last = (
        await append(tenantId, id, [
          {
            type: 'EmployeeHired',
            data: {
              employeeId: id,
              email: `${id.toLowerCase()}@example.test`,
              firstName: `F${i}`,
              lastName: i % 6 === 5 ? `L\t${i}\\x\n\r` : `L${i}`,
              department: i % 4 === 0 ? null : `d${i % 3}`,
              status: 'active',
              hiredAt,
            },
          },
        ])
      ).position;
    }
  }
  for (const [i, { tenantId, id }] of people.entries()) {
    const events: EmployeeEvent[] = [];
    if (i % 3 === 0)
      events.push({ type: 'EmployeeDetailsChanged', data: { employeeId: id, firstName: `G${i}`, department: i % 2 ? 'moved' : null } });
    if (i % 4 === 1)
      events.push({
        type: 'EmployeeEmailChanged',
        data: { employeeId: id, email: `new-${id.toLowerCase()}@example.test`, previousEmail: 'x' },
      });
    if (i % 5 === 2) {
      events.push({
        type: 'EmployeeStatusChanged',
        data: { employeeId: id, from: 'active', to: 'on_leave', reason: 'r', changedAt: '2025-01-01T00:00:00.000Z' },
      });
      events.push({
        type: 'EmployeeStatusChanged',
        data: { employeeId: id, from: 'on_leave', to: 'inactive', reason: null, changedAt: '2025-02-01T00:00:00.000Z' },
      });
    }
    if (i % 7 === 3) events.push({ type: 'EmployeeRoleAssigned', data: { employeeId: id, roleId: randomUUID() } });
    if (events.length > 0) last = (await append(tenantId, id, events)).position;
  }
  if (!last) throw new Error('no events');
  return last;
}

describe('when the employees projection is rebuilt as a bulk load', () => {
  it('builds the same model as the live projector and as the page-by-page replay', async () => {
    const tenants = [randomUUID(), randomUUID(), randomUUID()];
    const last = await givenAHistory(tenants, 40);
    expect(await waitForCheckpoint(db.pool, employeesProjection.name, last, 20_000)).toBe(true);
    const live = await employeesModelChecksums(db.pool);

    const bulk = await replayProjection(db.pool, store, employeesProjection);
    expect(await employeesModelChecksums(db.pool)).toEqual(live);

    const paged = await replayProjection(db.pool, store, pageByPage, { batchSize: 17 });
    expect(await employeesModelChecksums(db.pool)).toEqual(live);
    expect(bulk.processed).toBe(paged.processed);
  });

  it('applies events that commit during the build, readers see only complete models, and the live projector follows on', async () => {
    const tenantId = randomUUID();
    const first = await givenAHistory([tenantId], 60);
    expect(await waitForCheckpoint(db.pool, employeesProjection.name, first, 20_000)).toBe(true);
    const before = (await listEmployees(db.pool, tenantId, { page: 1, limit: 1 })).total;

    let reading = true;
    const seen = new Set<number>();
    const reader = (async () => {
      while (reading) seen.add((await listEmployees(db.pool, tenantId, { page: 1, limit: 1 })).total);
    })();
    const writer = (async () => {
      let position: GlobalPosition | undefined;
      for (let i = 0; i < 20; i++) {
        const id = nextId();
        position = (
          await append(tenantId, id, [
            {
              type: 'EmployeeHired',
              data: {
                employeeId: id,
                email: `${id.toLowerCase()}@example.test`,
                firstName: 'W',
                lastName: 'W',
                department: 'w',
                status: 'active',
                hiredAt: '2024-06-01T00:00:00.000Z',
              },
            },
          ])
        ).position;
      }
      return position;
    })();
    await replayProjection(db.pool, store, employeesProjection);
    const written = await writer;
    if (!written) throw new Error('no writes');
    expect(await waitForCheckpoint(db.pool, employeesProjection.name, written, 20_000)).toBe(true);
    reading = false;
    await reader;

    expect((await listEmployees(db.pool, tenantId, { page: 1, limit: 1 })).total).toBe(before + 20);
    // Never an empty or partial model: only totals between the old and the final one.
    expect([...seen].every((n) => n >= before && n <= before + 20)).toBe(true);
    expect((await readCheckpoint(db.pool, employeesProjection.name))?.version).toBe(employeesProjection.version);
    // What the live projector and the bulk build made together equals a fresh page-by-page build.
    const together = await employeesModelChecksums(db.pool);
    await replayProjection(db.pool, store, pageByPage, { batchSize: 50 });
    expect(await employeesModelChecksums(db.pool)).toEqual(together);
  });
});
