import { randomUUID } from 'node:crypto';
import { monotonicFactory } from 'ulid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql } from '../../../../shared/db/pool.ts';
import { appendInTransaction, PersonalEventRefusedError } from '../../../../shared/event-store/postgres/appendInTransaction.ts';
import { employeePersonalData, employeeStreamId } from '../../../../services/employees/contract.ts';
import { createTestDatabase, type TestDatabase } from '../../../support/database.ts';

/**
 * The append inside a caller's transaction stores events as given, around the sealing boundary:
 * an event type with personal fields never gets through it, so none is stored in the clear.
 */
const nextId = monotonicFactory();
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const storedRows = (streamIds: readonly string[]) =>
  db.pool.any(sql.type(z.object({ stream_id: z.string(), type: z.string(), data: z.record(z.string(), z.unknown()) }))`
    select stream_id, type, data from es_events where stream_id = any(${sql.array([...streamIds], 'text')}) order by stream_id, revision
  `);

describe('when an event type the policy names as personal is appended in a transaction', () => {
  it('refuses it before writing anything, the other streams of the append included', async () => {
    const tenantId = randomUUID();
    const other = employeeStreamId(tenantId, nextId());
    const hired = employeeStreamId(tenantId, nextId());
    const email = `clear.${nextId().toLowerCase()}@example.test`;
    const append = db.pool.transaction((tx) =>
      appendInTransaction(
        tx,
        [
          { streamId: other, events: [{ id: randomUUID(), type: 'EmployeeRoleAssigned', data: { employeeId: 'y', roleId: 'r' } }] },
          {
            streamId: hired,
            events: [{ id: randomUUID(), type: 'EmployeeHired', data: { employeeId: 'x', email, firstName: 'Clear', lastName: 'Text' } }],
            expectedRevision: 'no_stream',
          },
        ],
        employeePersonalData,
      ),
    );
    await expect(append).rejects.toBeInstanceOf(PersonalEventRefusedError);
    await expect(append).rejects.toThrow(/EmployeeHired.*sealing boundary/);
    expect(await storedRows([other, hired])).toEqual([]);
    const anywhere = await db.pool.oneFirst(sql.type(z.object({ n: z.number() }))`
      select count(*)::int4 as n from es_events where data::text ilike ${`%${email}%`}
    `);
    expect(anywhere).toBe(0);
  });
});

describe('when the events carry nothing personal', () => {
  it('stores them as given, committed with the transaction', async () => {
    const streamId = employeeStreamId(randomUUID(), nextId());
    const erasedAt = '2026-05-01T00:00:00.000Z';
    const [result] = await db.pool.transaction((tx) =>
      appendInTransaction(
        tx,
        [{ streamId, events: [{ id: randomUUID(), type: 'EmployeeErased', data: { employeeId: 'x', erasedAt } }] }],
        employeePersonalData,
      ),
    );
    expect(result?.nextRevision).toBe(0);
    expect(await storedRows([streamId])).toEqual([{ stream_id: streamId, type: 'EmployeeErased', data: { employeeId: 'x', erasedAt } }]);
  });
});
