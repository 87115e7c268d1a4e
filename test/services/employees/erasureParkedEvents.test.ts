import { monotonicFactory } from 'ulid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { START, comparePositions, type EventStore, type RecordedEvent } from '../../../shared/event-store/port.ts';
import type { DataKeyStore } from '../../../shared/personal-data/dataKeys.ts';
import { runProjection } from '../../../shared/projections/follow.ts';
import { RetryLaterError } from '../../../shared/projections/failures.ts';
import { parkEvent } from '../../../shared/projections/parking.ts';
import { defineProjection } from '../../../shared/projections/projection.ts';
import { erasurePorts } from '../../../services/employees/capability.ts';
import { hireEmployee } from '../../../services/employees/commands.ts';
import { employeeStreamId } from '../../../services/employees/contract.ts';
import { eraseEmployee, type ErasurePorts } from '../../../services/employees/erasure.ts';
import { provisionTenant } from '../../support/auth.ts';
import { createTestDatabase, sqlAt, type TestDatabase } from '../../support/database.ts';
import { sealedEventStore, testEmailHash } from '../../support/personalData.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * A projection parks an event as it was handed it, opened. One that read a page of the person's
 * events before their erasure committed, and parks one of them after, must not keep their
 * personal fields: neither when its page commits after the erasure, nor when its page parked
 * the event before the erasure and commits while the erasure runs.
 */
const nextId = monotonicFactory();
let db: TestDatabase;
let log: EventStore;
let store: EventStore;
let keys: DataKeyStore;
let ports: ErasurePorts;

beforeAll(async () => {
  db = await createTestDatabase();
  log = createPostgresEventStore(db.pool, { listenUrl: db.url });
  ({ store, keys } = sealedEventStore(log, db.pool));
  ports = erasurePorts({ store, log, pool: db.pool, emailHash: testEmailHash, dataKeys: keys, logInDatabase: true });
});
afterAll(async () => {
  await store?.close();
  await db?.drop();
});

const metadata = (tenantId: string) => ({ tenantId, actor: 'spec', now: new Date().toISOString() });

async function hired(tenantId: string): Promise<{ employeeId: string; email: string }> {
  const employeeId = nextId();
  const email = `${employeeId.toLowerCase()}@parked.test`;
  await hireEmployee(
    { store, emailHash: testEmailHash, assertRoleExists: async () => undefined },
    { type: 'HireEmployee', data: { employeeId, email, firstName: 'Parked', lastName: 'Late' }, metadata: metadata(tenantId) },
  );
  return { employeeId, email };
}

/** Whether a statement of this database waits to take an exclusive advisory lock (the erasure's, on the stream). */
async function erasureWaits(): Promise<boolean> {
  const [row] = await sqlAt<{ n: string }>(
    db.url,
    `select count(*) as n from pg_stat_activity
     where datname = current_database() and wait_event_type = 'Lock' and query like '%pg_advisory_xact_lock(%'`,
  );
  return row?.n !== '0';
}

/** The parked copy's data as stored, read from outside the code under test. */
const parkedData = (projection: string, eventId: string) =>
  db.pool.maybeOneFirst(sql.type(z.object({ data: z.record(z.string(), z.unknown()) }))`
    select data from projection_parked_events where projection = ${projection} and event_id = ${eventId}
  `);

/** Whether a read of the whole log returns an event of `streamId`. */
async function logReads(streamId: string): Promise<boolean> {
  let after = START;
  for (;;) {
    const page = await log.readAll({ after, maxCount: 1_000 });
    if (page.events.some((e) => e.streamId === streamId)) return true;
    if (comparePositions(page.checkpoint, after) === 0) return false;
    after = page.checkpoint;
  }
}

/** A promise and the function that settles it: a gate a test opens. */
function gate<T = void>(): { readonly promise: Promise<T>; readonly open: (value: T) => void } {
  let open: (value: T) => void = () => undefined;
  const promise = new Promise<T>((resolve) => (open = resolve));
  return { promise, open };
}

/**
 * A projector whose handler, handed the hire on `streamId`, reports it (`handed`), waits for
 * `failOn` and then fails on it: its page, read before, is isolated and the hire parked then.
 */
function lateParker(streamId: string, failOn: Promise<void>, onError?: (error: unknown) => void) {
  const handed = gate<RecordedEvent>();
  const table = `late_parker_${nextId().toLowerCase()}`;
  const projection = defineProjection<string>({
    name: table,
    version: 1,
    eventTypes: ['EmployeeHired'],
    tables: { [table]: (id) => [sql.fragment`create table ${id} (event_id text primary key)`] },
    async handle(_tx, events) {
      const hire = events.find((e) => e.streamId === streamId);
      if (!hire) return;
      handed.open(hire);
      await failOn;
      throw new Error('this projection cannot apply the hire');
    },
  });
  const projector = runProjection(db.pool, store, projection, {
    pollIntervalMs: 50,
    isolation: { maxAttempts: 1, backoffMs: 0 },
    ...(onError && { onError }),
  });
  return { name: projection.name, handed: handed.promise, projector };
}

describe('when a projection read the hire before the erasure and parks it after the erasure committed', () => {
  it('parks it with the personal fields null', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const person = await hired(tenantId);
    const erased = gate();
    const parker = lateParker(employeeStreamId(tenantId, person.employeeId), erased.promise);
    try {
      const hire = await parker.handed;
      expect(hire.data).toMatchObject({ email: person.email, firstName: 'Parked' });
      expect(await eraseEmployee(ports, person.employeeId, metadata(tenantId))).toMatchObject({ fresh: true });
      erased.open();
      const parked = await waitFor(() => parkedData(parker.name, hire.id), 20_000, 'the hire parked');
      expect(parked).toMatchObject({ employeeId: person.employeeId, email: null, firstName: null, lastName: null });
      expect(JSON.stringify(parked)).not.toContain(person.email);
    } finally {
      erased.open();
      await parker.projector.stop();
    }
  });
});

describe('when a projection read the hire before the erasure and parks it while the erasure is in flight', () => {
  it('does not park it then, reads its page again after the erasure and parks the hire with the personal fields null', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const person = await hired(tenantId);
    const inFlight = gate();
    const finish = gate();
    const holding: ErasurePorts = {
      ...ports,
      forget: async (tx, erased) => {
        await ports.forget(tx, erased);
        inFlight.open();
        await finish.promise;
      },
    };
    const park = gate();
    const errors: unknown[] = [];
    const parker = lateParker(employeeStreamId(tenantId, person.employeeId), park.promise, (error) => errors.push(error));
    let erasure: Promise<unknown> | undefined;
    try {
      const hire = await parker.handed;
      expect(hire.data).toMatchObject({ email: person.email });
      erasure = eraseEmployee(holding, person.employeeId, metadata(tenantId));
      await inFlight.promise;
      park.open();
      // Either the page parks the hire now (nothing stops it) or it is turned back to be read again.
      await waitFor(
        async () => errors.some((e) => e instanceof RetryLaterError) || (await parkedData(parker.name, hire.id)) !== null,
        20_000,
        'the park tried',
      );
      expect(errors.filter((e) => e instanceof RetryLaterError).length).toBeGreaterThan(0);
      finish.open();
      expect(await erasure).toMatchObject({ fresh: true });
      const parked = await waitFor(() => parkedData(parker.name, hire.id), 20_000, 'the hire parked');
      expect(parked).toMatchObject({ employeeId: person.employeeId, email: null, firstName: null, lastName: null });
    } finally {
      park.open();
      finish.open();
      await erasure?.catch(() => undefined);
      await parker.projector.stop();
    }
  });
});

describe('when a projection parked the hire before the erasure and commits while the erasure runs', () => {
  it('the erasure waits for that page and blanks the copy it committed', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const person = await hired(tenantId);
    const [hire] = await store.readStream(employeeStreamId(tenantId, person.employeeId));
    if (!hire) throw new Error('no hire');
    expect(hire.data).toMatchObject({ email: person.email });
    const projection = { name: `in_flight_${nextId().toLowerCase()}`, version: 1 };
    const inPage = gate();
    const committing = gate();
    // A projection's page transaction: it parks the opened hire, then stays open.
    const page = db.pool.transaction(async (tx) => {
      await parkEvent(tx, projection, hire, { error: 'cannot apply', attempts: 1 });
      inPage.open();
      await committing.promise;
    });
    try {
      await inPage.promise;
      let settled = false;
      const erasure = eraseEmployee(ports, person.employeeId, metadata(tenantId)).finally(() => (settled = true));
      // The erasure either finishes at once (nothing orders it after the page) or waits for the page.
      await waitFor(async () => settled || (await erasureWaits()), 20_000, 'the erasure to wait or end');
      if (!settled) {
        // Waiting, the erasure holds no row of the log yet: readers of the log are not held back.
        const other = await provisionTenant(db.pool);
        const someone = await hired(other.tenantId);
        const streamId = employeeStreamId(other.tenantId, someone.employeeId);
        await waitFor(
          async () => (await logReads(streamId)) && !settled,
          5_000,
          "another tenant's hire to be read while the erasure waits",
        );
      }
      committing.open();
      await page;
      expect(await erasure).toMatchObject({ fresh: true });
      const parked = await parkedData(projection.name, hire.id);
      expect(parked).toMatchObject({ employeeId: person.employeeId, email: null, firstName: null, lastName: null });
    } finally {
      committing.open();
    }
  });
});

describe('when the redaction of a stream is recorded again', () => {
  it('keeps one row with every field named', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const person = await hired(tenantId);
    await eraseEmployee(ports, person.employeeId, metadata(tenantId));
    expect(await eraseEmployee(ports, person.employeeId, metadata(tenantId))).toMatchObject({ fresh: false });
    const rows = await db.pool.any(sql.type(z.object({ fields: z.array(z.string()) }))`
      select fields from projection_parked_redactions where stream_id = ${employeeStreamId(tenantId, person.employeeId)}
    `);
    expect(rows).toEqual([{ fields: ['email', 'firstName', 'lastName', 'previousEmail', 'reason'] }]);
  });
});
