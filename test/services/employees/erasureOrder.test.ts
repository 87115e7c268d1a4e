import { AsyncLocalStorage } from 'node:async_hooks';
import { monotonicFactory } from 'ulid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql, withTenant } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import type { DataKeyStore } from '../../../shared/personal-data/dataKeys.ts';
import { createUser } from '../../../services/auth/users.ts';
import { erasurePorts } from '../../../services/employees/capability.ts';
import { changeEmployeeDetails, changeEmployeeStatus, hireEmployee, loadEmployee } from '../../../services/employees/commands.ts';
import { ErasedError } from '../../../shared/errors.ts';
import { employeeStreamId } from '../../../services/employees/contract.ts';
import { emailReservationStreamId } from '../../../services/employees/emailReservation.ts';
import { eraseEmployee, type ErasurePorts } from '../../../services/employees/erasure.ts';
import { listErasures } from '../../../services/employees/erasureLedger.ts';
import { provisionTenant } from '../../support/auth.ts';
import { createTestDatabase, waitsForLock, type TestDatabase } from '../../support/database.ts';
import { sealedEventStore, testEmailHash } from '../../support/personalData.ts';

/**
 * The erasure's order against failures and against what runs beside it: a crash or a failure
 * part-way, commands on the person, a hire at an address they held.
 *
 * When the log is not in PostgreSQL (KurrentDB), `EmployeeErased` is appended first, then the key
 * is destroyed with the rest in one PostgreSQL transaction. A crash between the two leaves the
 * event without its destruction; the next erasure request completes it. Run here on the
 * PostgreSQL adapter with `logInDatabase: false`, which takes exactly that path.
 */
const nextId = monotonicFactory();
let db: TestDatabase;
let store: EventStore;
let log: EventStore;
let keys: DataKeyStore;

beforeAll(async () => {
  db = await createTestDatabase();
  log = createPostgresEventStore(db.pool);
  ({ store, keys } = sealedEventStore(log, db.pool));
});
afterAll(async () => {
  await store?.close();
  await db?.drop();
});

async function hired(tenantId: string, email?: string): Promise<string> {
  const employeeId = nextId();
  await hireEmployee(
    { store, emailHash: testEmailHash, assertRoleExists: async () => undefined },
    {
      type: 'HireEmployee',
      data: { employeeId, email: email ?? `${employeeId}@order.test`, firstName: 'Kurt', lastName: 'Order' },
      metadata: { tenantId, actor: 'spec', now: new Date().toISOString() },
    },
  );
  return employeeId;
}

const metadata = (tenantId: string, now: string) => ({ tenantId, actor: 'spec', now });

/** The store, whose first read of `streamId` runs `act` after reading: what the reader decides on is then stale. */
function afterFirstRead(streamId: string, act: () => Promise<unknown>): { readonly store: EventStore; acted(): boolean } {
  let acted = false;
  return {
    store: {
      ...store,
      readStream: async (read, options) => {
        const events = await store.readStream(read, options);
        if (read === streamId && !acted) {
          acted = true;
          await act();
        }
        return events;
      },
    },
    acted: () => acted,
  };
}

describe('when the log is elsewhere and the process dies between the append and the key destruction', () => {
  it('has the event without the destruction, and a repeated request completes the erasure at the first erasedAt', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const id = await hired(tenantId);
    const ports = erasurePorts({ store, log, pool: db.pool, emailHash: testEmailHash, dataKeys: keys, logInDatabase: false });
    const crashing: ErasurePorts = {
      ...ports,
      forget: () => Promise.reject(new Error('the process died here')),
    };
    await expect(eraseEmployee(crashing, id, metadata(tenantId, '2026-01-01T00:00:00.000Z'))).rejects.toThrow('died');
    expect((await store.readStream(employeeStreamId(tenantId, id))).map((e) => e.type)).toContain('EmployeeErased');
    expect(await keys.isDestroyed(tenantId, id)).toBe(false);
    expect((await listErasures(db.pool, tenantId)).length).toBe(0);

    const again = await eraseEmployee(ports, id, metadata(tenantId, '2026-02-01T00:00:00.000Z'));
    expect(again).toMatchObject({ id, erasedAt: '2026-01-01T00:00:00.000Z', fresh: false });
    expect(await keys.isDestroyed(tenantId, id)).toBe(true);
    expect(await listErasures(db.pool, tenantId)).toEqual([{ tenantId, employeeId: id, erasedAt: '2026-01-01T00:00:00.000Z' }]);
    const hire = (await store.readStream(employeeStreamId(tenantId, id)))[0];
    expect(hire?.redacted).toBe(true);
    expect(hire?.data).toMatchObject({ email: null, firstName: null, lastName: null });
  });
});

describe('when the log is in PostgreSQL and what follows the append fails', () => {
  it('appends nothing: the event and the destruction commit together or not at all', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const id = await hired(tenantId);
    const ports = erasurePorts({ store, log, pool: db.pool, emailHash: testEmailHash, dataKeys: keys, logInDatabase: true });
    await expect(
      eraseEmployee({ ...ports, forget: () => Promise.reject(new Error('failed')) }, id, metadata(tenantId, '2026-01-01T00:00:00.000Z')),
    ).rejects.toThrow('failed');
    expect((await store.readStream(employeeStreamId(tenantId, id))).map((e) => e.type)).toEqual(['EmployeeHired']);
    expect(await keys.isDestroyed(tenantId, id)).toBe(false);
  });
});

describe('when the key is destroyed but the log lacks the erasure (a log restored from before it)', () => {
  it('erases again without an address to release or forget', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const id = await hired(tenantId);
    await db.pool.transaction((tx) => keys.destroy(tenantId, id, tx));
    const ports = erasurePorts({ store, log, pool: db.pool, emailHash: testEmailHash, dataKeys: keys, logInDatabase: true });
    const result = await eraseEmployee(ports, id, metadata(tenantId, '2026-03-01T00:00:00.000Z'));
    expect(result).toMatchObject({ id, erasedAt: '2026-03-01T00:00:00.000Z', fresh: true });
    expect((await store.readStream(employeeStreamId(tenantId, id))).map((e) => e.type)).toEqual(['EmployeeHired', 'EmployeeErased']);
  });
});

describe('when the employee changes between the erasure reading it and appending', () => {
  it('decides again on the fresh stream and erases', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const id = await hired(tenantId);
    const streamId = employeeStreamId(tenantId, id);
    const racing = afterFirstRead(streamId, () =>
      changeEmployeeStatus(
        { store, emailHash: testEmailHash, assertRoleExists: async () => undefined },
        id,
        metadata(tenantId, '2026-04-01T00:00:00.000Z'),
        { status: 'on_leave' },
      ),
    );
    const ports = erasurePorts({ store: racing.store, log, pool: db.pool, emailHash: testEmailHash, dataKeys: keys, logInDatabase: true });
    expect(await eraseEmployee(ports, id, metadata(tenantId, '2026-04-02T00:00:00.000Z'))).toMatchObject({ fresh: true });
    expect(racing.acted()).toBe(true);
    expect((await store.readStream(streamId)).map((e) => e.type)).toEqual(['EmployeeHired', 'EmployeeStatusChanged', 'EmployeeErased']);
  });
});

describe("when the employee is erased between a command's decision and its append", () => {
  it('answers the command as on an erased employee (410 with erasedAt), not as a conflict', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const id = await hired(tenantId);
    const streamId = employeeStreamId(tenantId, id);
    const ports = erasurePorts({ store, log, pool: db.pool, emailHash: testEmailHash, dataKeys: keys, logInDatabase: true });
    const racing = afterFirstRead(streamId, () => eraseEmployee(ports, id, metadata(tenantId, '2026-05-01T00:00:00.000Z')));
    const rename = changeEmployeeDetails({ store: racing.store, emailHash: testEmailHash, assertRoleExists: async () => undefined }, id, {
      type: 'ChangeEmployeeDetails',
      data: { firstName: 'Late' },
      metadata: metadata(tenantId, '2026-05-01T00:00:01.000Z'),
    });
    await expect(rename).rejects.toMatchObject({ status: 410, code: 'erased', extras: { erasedAt: '2026-05-01T00:00:00.000Z' } });
    expect(racing.acted()).toBe(true);
    expect((await store.readStream(streamId)).map((e) => e.type)).toEqual(['EmployeeHired', 'EmployeeErased']);
  });
});

describe('when the key is gone but the log lacks the erasure (a log restored without it)', () => {
  it('reads the employee as erased, not as one without a name', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const id = await hired(tenantId);
    await keys.destroy(tenantId, id, db.pool);
    await expect(loadEmployee(store, tenantId, id)).rejects.toBeInstanceOf(ErasedError);
  });
});

const loginAt = (tenantId: string, email: string) =>
  withTenant(db.pool, tenantId, (tx) => createUser(tx, { tenantId, email, password: 'a password of theirs', role: 'employee' }));

const loginRow = (tenantId: string, id: string) =>
  withTenant(db.pool, tenantId, (tx) =>
    tx.one(sql.type(z.object({ email: z.string(), disabled: z.boolean() }))`
      select email, disabled_at is not null as disabled from users where id = ${id}
    `),
  );

/** A tenant with a person hired at `former` who moved on to another address. */
async function movedOn() {
  const { tenantId } = await provisionTenant(db.pool);
  const former = `${nextId().toLowerCase()}@race.test`;
  const person = await hired(tenantId, former);
  await changeEmployeeDetails({ store, emailHash: testEmailHash, assertRoleExists: async () => undefined }, person, {
    type: 'ChangeEmployeeDetails',
    data: { email: `${nextId().toLowerCase()}@race.test` },
    metadata: metadata(tenantId, new Date().toISOString()),
  });
  return { tenantId, former, person };
}

describe('when another employee is hired at a former address of the person while the erasure runs', () => {
  it('leaves that employee their login at it when the hire commits after the erasure read the address', async () => {
    const { tenantId, former, person } = await movedOn();

    // The erasure's first read of the former address's reservation is followed, before it
    // returns, by a hire there and a login made for the new employee.
    let theirs: { readonly id: string } | undefined;
    const racing = afterFirstRead(emailReservationStreamId(testEmailHash, tenantId, former), async () => {
      await hired(tenantId, former);
      theirs = await loginAt(tenantId, former);
    });
    const ports = erasurePorts({ store: racing.store, log, pool: db.pool, emailHash: testEmailHash, dataKeys: keys, logInDatabase: true });

    const result = await eraseEmployee(ports, person, metadata(tenantId, new Date().toISOString()));

    expect(result.fresh).toBe(true);
    expect(racing.acted()).toBe(true);
    if (theirs === undefined) throw new Error('the erasure never read the former address');
    expect(await loginRow(tenantId, theirs.id)).toEqual({ email: former, disabled: false });
    expect(await keys.isDestroyed(tenantId, person)).toBe(true);
  });

  it('leaves that employee their login at it when the hire comes once the erasure is under way', async () => {
    const { tenantId, former, person } = await movedOn();
    const ports = erasurePorts({ store, log, pool: db.pool, emailHash: testEmailHash, dataKeys: keys, logInDatabase: true });
    // In the erasure's transaction, just before it forgets the person: a hire at the former
    // address, and a login for the new employee once hired. The hire waits for the erasure to
    // commit; it is not awaited here, only seen waiting (or done, when nothing holds it). It runs
    // outside the transaction's context, as another request would (slonik refuses the pool
    // inside it).
    const outside = AsyncLocalStorage.snapshot();
    let hiring: Promise<{ readonly id: string }> | undefined;
    let waited = false;
    const racing = {
      ...ports,
      forget: async (...args: Parameters<typeof ports.forget>) => {
        const started = (hiring = outside(() => hired(tenantId, former).then(() => loginAt(tenantId, former))));
        let done = false;
        void started.then(
          () => (done = true),
          () => (done = true),
        );
        const deadline = Date.now() + 5_000;
        while (!done && !(waited = await waitsForLock(db.url, '%es_append_batch%')) && Date.now() < deadline)
          await new Promise((r) => setTimeout(r, 10));
        await ports.forget(...args);
      },
    };

    await eraseEmployee(racing, person, metadata(tenantId, new Date().toISOString()));

    if (hiring === undefined) throw new Error('the erasure never forgot the person');
    const theirs = await hiring;
    expect(waited).toBe(true);
    expect(await loginRow(tenantId, theirs.id)).toEqual({ email: former, disabled: false });
  });
});
