import { randomUUID } from 'node:crypto';
import { monotonicFactory } from 'ulid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hireEmployee } from '../../../services/employees/commands.ts';
import { legacyReservationStreamId } from '../../../services/employees/emailReservation.ts';
import { convertLegacyReservations, watchLegacyReservations } from '../../../services/employees/legacyReservations.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { sealedEventStore, testEmailHash } from '../../support/personalData.ts';

/** Whether hires look for reservations of the first form: only while the log may hold any (real PostgreSQL). */
const nextId = monotonicFactory();
let db: TestDatabase;
let raw: EventStore;
let sealed: EventStore;

beforeAll(async () => {
  db = await createTestDatabase();
  raw = createPostgresEventStore(db.pool);
  ({ store: sealed } = sealedEventStore(raw, db.pool));
});
afterAll(async () => {
  await sealed?.close();
  await db?.drop();
});

const reserved = (tenantId: string, email: string) => ({
  id: randomUUID(),
  type: 'EmployeeEmailReserved',
  data: { employeeId: nextId(), email },
  metadata: { tenantId, actor: 'older-service' },
});

describe('the watch on first-form email reservations', () => {
  it('says "none" on an empty log of this database, "may" while one exists, "none" for good once converted', async () => {
    expect(await watchLegacyReservations(db.pool, { logInDatabase: true })()).toBe(false);
    const watch = watchLegacyReservations(db.pool, { logInDatabase: true, recheckMs: 0 });
    const tenantId = randomUUID();
    const email = `old.${randomUUID().slice(0, 8)}@example.test`;
    await raw.append(legacyReservationStreamId(tenantId, email), [reserved(tenantId, email)]);
    expect(await watch()).toBe(true);
    expect(await watch()).toBe(true);
    await convertLegacyReservations(db.pool, testEmailHash);
    expect(await watch()).toBe(false);
  });

  it('says "may" always for a log kept elsewhere (KurrentDB), whose first-form streams are never converted', async () => {
    const watch = watchLegacyReservations(db.pool, { logInDatabase: false, recheckMs: 0 });
    expect(await watch()).toBe(true);
    expect(await watch()).toBe(true);
  });

  it('spares a hire the read of the first-form stream once none exist, and not before', async () => {
    const reads: string[] = [];
    const counting: EventStore = {
      ...sealed,
      readStream: (streamId, options) => {
        reads.push(streamId);
        return sealed.readStream(streamId, options);
      },
    };
    const tenantId = randomUUID();
    const hire = (legacyReservations: () => Promise<boolean>) =>
      hireEmployee(
        { store: counting, assertRoleExists: async () => undefined, emailHash: testEmailHash, legacyReservations },
        {
          type: 'HireEmployee',
          data: { employeeId: nextId(), email: `n.${randomUUID().slice(0, 8)}@example.test`, firstName: 'New', lastName: 'Hire' },
          metadata: { tenantId, actor: 'spec', now: new Date().toISOString() },
        },
      );
    const isLegacy = (id: string) => /^employee-email-[0-9a-f-]{36}-[0-9a-f]{64}$/.test(id);
    await hire(async () => true);
    expect(reads.filter(isLegacy)).toHaveLength(1);
    await hire(watchLegacyReservations(db.pool, { logInDatabase: true }));
    expect(reads.filter(isLegacy)).toHaveLength(1);
  });
});
