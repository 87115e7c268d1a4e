import { randomUUID } from 'node:crypto';
import { monotonicFactory } from 'ulid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { employeesModelChecksums } from '../../../projections/employees/checksums.ts';
import { employeesProjection } from '../../../projections/employees/employeesProjection.ts';
import { listEmployees } from '../../../projections/employees/queries.ts';
import { employeeStreamId, type EmployeeEvent } from '../../../services/employees/contract.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore, GlobalPosition } from '../../../shared/event-store/port.ts';
import type { DataKeyStore } from '../../../shared/personal-data/dataKeys.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { sealedEventStore } from '../../support/personalData.ts';

/**
 * Erased employees in the list model: the live projector deletes the row and takes it off every
 * counter; the bulk and page-by-page rebuilds, which meet the erasure and (once the key is gone)
 * fields that no longer open, build exactly the same model; lists and totals agree.
 */
let db: TestDatabase;
let store: EventStore;
let keys: DataKeyStore;
let projector: ProjectorHandle;
const nextId = monotonicFactory();

beforeAll(async () => {
  db = await createTestDatabase();
  ({ store, keys } = sealedEventStore(createPostgresEventStore(db.pool, { listenUrl: db.url }), db.pool));
  projector = runProjection(db.pool, store, employeesProjection, { pollIntervalMs: 50 });
});
afterAll(async () => {
  await projector?.stop();
  await store?.close();
  await db?.drop();
});

const append = (tenantId: string, id: string, events: EmployeeEvent[]) =>
  store.append(
    employeeStreamId(tenantId, id),
    events.map((e) => ({ id: randomUUID(), ...e, metadata: { tenantId, actor: 'spec', occurredAt: '2025-01-01T00:00:00.000Z' } })),
  );

describe('when some employees of a history are erased', () => {
  it('leaves them out of the live model, its counters and both rebuilds alike', async () => {
    const tenantId = randomUUID();
    const kept: string[] = [];
    let last: GlobalPosition | undefined;
    for (let i = 0; i < 30; i++) {
      const id = nextId();
      const hiredAt = new Date(Date.UTC(2021 + (i % 3), (i * 5) % 12, 1 + (i % 27), 12)).toISOString();
      const events: EmployeeEvent[] = [
        {
          type: 'EmployeeHired',
          data: {
            employeeId: id,
            email: `${id}@erased.test`,
            firstName: 'E',
            lastName: 'R',
            department: `d${i % 3}`,
            status: 'active',
            hiredAt,
          },
        },
      ];
      if (i % 2 === 0) {
        events.push({
          type: 'EmployeeStatusChanged',
          data: { employeeId: id, from: 'active', to: 'on_leave', reason: null, changedAt: hiredAt },
        });
      }
      last = (await append(tenantId, id, events)).position;
      if (i % 3 === 0) {
        last = (await append(tenantId, id, [{ type: 'EmployeeErased', data: { employeeId: id, erasedAt: '2025-06-01T00:00:00.000Z' } }]))
          .position;
        // Most erasures destroy the key, as the service's do; some (a KurrentDB log mid-erasure) not yet.
        if (i % 2 === 0) await db.pool.transaction((tx) => keys.destroy(tenantId, id, tx));
      } else kept.push(id);
    }
    if (!last) throw new Error('no events');
    expect(await waitForCheckpoint(db.pool, employeesProjection.name, last, 20_000)).toBe(true);
    const live = await employeesModelChecksums(db.pool);
    const list = async () => {
      const page = await listEmployees(db.pool, tenantId, { page: 1, limit: 100 });
      const inRange = await listEmployees(db.pool, tenantId, {
        page: 1,
        limit: 100,
        department: 'd0',
        hiredFrom: { at: '2021-03-01T00:00:00.000Z', dateOnly: true },
      });
      return { ids: page.data.map((e) => e.id).sort(), total: page.total, inRange: [inRange.data.length, inRange.total] };
    };
    const seen = await list();
    expect(seen.ids).toEqual([...kept].sort());
    expect(seen.total).toBe(kept.length);
    expect(seen.inRange[1]).toBe(seen.inRange[0]);

    await replayProjection(db.pool, store, employeesProjection);
    expect(await employeesModelChecksums(db.pool)).toEqual(live);
    await replayProjection(db.pool, store, { ...employeesProjection, bulk: undefined }, { batchSize: 7 });
    expect(await employeesModelChecksums(db.pool)).toEqual(live);
    expect(await list()).toEqual(seen);
  });
});
