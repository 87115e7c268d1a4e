import { AsyncLocalStorage } from 'node:async_hooks';
import { monotonicFactory } from 'ulid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ignoredRows, sql, withTenant } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import type { DataKeyStore } from '../../../shared/personal-data/dataKeys.ts';
import { issueRefreshToken } from '../../../services/auth/refreshTokens.ts';
import { createUser } from '../../../services/auth/users.ts';
import { erasurePorts } from '../../../services/employees/capability.ts';
import { changeEmployeeDetails, changeEmployeeStatus, hireEmployee, loadEmployee } from '../../../services/employees/commands.ts';
import { ErasedError } from '../../../shared/errors.ts';
import { employeeStreamId } from '../../../services/employees/contract.ts';
import { emailReservationStreamId } from '../../../services/employees/emailReservation.ts';
import { eraseEmployee, type ErasurePorts } from '../../../services/employees/erasure.ts';
import { listErasures } from '../../../services/employees/erasureLedger.ts';
import { eraseAll, erasuresToReapply } from '../../../services/employees/erasureRuns.ts';
import { provisionTenant } from '../../support/auth.ts';
import { createTestDatabase, waitsForLock, type TestDatabase } from '../../support/database.ts';
import { sealedEventStore, testEmailHash } from '../../support/personalData.ts';
import { waitFor } from '../../support/waitFor.ts';

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

const keyRow = z.object({ kek_id: z.string(), sealed_key: z.string() });
const liveTokens = (tenantId: string, userId: string) =>
  withTenant(db.pool, tenantId, (tx) =>
    tx.anyFirst(sql.type(z.object({ id: z.string() }))`
      select id::text from refresh_tokens where user_id = ${userId} and revoked_at is null
    `),
  );

/**
 * What a PostgreSQL backup taken now holds of the person's key and of their login (with its
 * refresh tokens), and the restore that puts them back under a log that keeps what came since
 * (KurrentDB's, which a PostgreSQL restore does not roll back): the erasure's ledger entry goes.
 */
async function backupOf(tenantId: string, employeeId: string, userId: string): Promise<() => Promise<void>> {
  const key = await db.pool.one(sql.type(keyRow)`
    select kek_id, sealed_key from personal_data_keys where tenant_id = ${tenantId} and subject_id = ${employeeId}
  `);
  const login = await withTenant(db.pool, tenantId, (tx) =>
    tx.one(sql.type(z.object({ email: z.string(), email_key: z.string() }))`select email, email_key from users where id = ${userId}`),
  );
  return async () => {
    await db.pool.query(sql.type(ignoredRows)`
      update personal_data_keys set kek_id = ${key.kek_id}, sealed_key = ${key.sealed_key}, destroyed_at = null
      where tenant_id = ${tenantId} and subject_id = ${employeeId}
    `);
    await db.pool.query(sql.type(ignoredRows)`
      delete from employee_erasures where tenant_id = ${tenantId} and employee_id = ${employeeId}
    `);
    await withTenant(db.pool, tenantId, async (tx) => {
      await tx.query(sql.type(ignoredRows)`
        update users set email = ${login.email}, email_key = ${login.email_key}, disabled_at = null where id = ${userId}
      `);
      await tx.query(sql.type(ignoredRows)`update refresh_tokens set revoked_at = null where user_id = ${userId}`);
    });
  };
}

const crashing = (ports: ErasurePorts): ErasurePorts => ({ ...ports, forget: () => Promise.reject(new Error('the process died here')) });

describe('when the erasure is repeated after another employee was hired at the address it freed', () => {
  it('forgets the login the person had there, which a crash before the forgetting left with their password', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const address = `${nextId().toLowerCase()}@freed.test`;
    const person = await hired(tenantId, address);
    const own = await loginAt(tenantId, address);
    const ports = erasurePorts({ store, log, pool: db.pool, emailHash: testEmailHash, dataKeys: keys, logInDatabase: false });
    await expect(eraseEmployee(crashing(ports), person, metadata(tenantId, new Date().toISOString()))).rejects.toThrow('died');
    await hired(tenantId, address);

    expect(await eraseEmployee(ports, person, metadata(tenantId, new Date().toISOString()))).toMatchObject({ fresh: false });

    expect(await loginRow(tenantId, own.id)).toEqual({ email: `erased-${own.id}@erased.invalid`, disabled: true });
    expect(await keys.isDestroyed(tenantId, person)).toBe(true);
  });

  it('forgets the login a restored backup brings back with the key, when the erasures are re-applied', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const address = `${nextId().toLowerCase()}@freed.test`;
    const person = await hired(tenantId, address);
    const own = await loginAt(tenantId, address);
    await withTenant(db.pool, tenantId, (tx) => issueRefreshToken(tx, { tenantId, userId: own.id, now: Date.now() }));
    const restore = await backupOf(tenantId, person, own.id);
    const ports = erasurePorts({ store, log, pool: db.pool, emailHash: testEmailHash, dataKeys: keys, logInDatabase: true });
    await eraseEmployee(ports, person, metadata(tenantId, new Date().toISOString()));
    await hired(tenantId, address);
    await restore();
    expect(await loginRow(tenantId, own.id)).toEqual({ email: address, disabled: false });

    // The processes that run after a restore start afresh: no key remembered as destroyed.
    const restarted = sealedEventStore(log, db.pool);
    try {
      const after = erasurePorts({
        store: restarted.store,
        log,
        pool: db.pool,
        emailHash: testEmailHash,
        dataKeys: restarted.keys,
        logInDatabase: true,
      });
      expect(await eraseAll(after, await erasuresToReapply(after, tenantId), 'spec')).toEqual({ erased: 0, already: 1, absent: 0 });

      expect(await loginRow(tenantId, own.id)).toEqual({ email: `erased-${own.id}@erased.invalid`, disabled: true });
      expect(await liveTokens(tenantId, own.id)).toEqual([]);
      expect(await restarted.keys.isDestroyed(tenantId, person)).toBe(true);
    } finally {
      // Its own key store only: the log underneath is the file's.
      await restarted.keys.close?.();
    }
  });

  it("leaves a login made at the address after the erasure, the next holder's, before their hire and after it", async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const address = `${nextId().toLowerCase()}@freed.test`;
    const person = await hired(tenantId, address);
    const ports = erasurePorts({ store, log, pool: db.pool, emailHash: testEmailHash, dataKeys: keys, logInDatabase: false });
    await expect(eraseEmployee(crashing(ports), person, metadata(tenantId, new Date().toISOString()))).rejects.toThrow('died');
    const erasure = (await log.readStream(employeeStreamId(tenantId, person))).find((e) => e.type === 'EmployeeErased');
    if (!erasure) throw new Error('the erasure was not appended');
    // A login made after the erasure, in a later millisecond: one made within the erasure's own
    // millisecond counts as the person's.
    await waitFor(() =>
      db.pool.oneFirst(sql.type(z.object({ later: z.boolean() }))`
        select date_trunc('milliseconds', now()) > ${erasure.recordedAt}::timestamptz as later
      `),
    );
    const theirs = await loginAt(tenantId, address);

    await eraseEmployee(ports, person, metadata(tenantId, new Date().toISOString()));
    expect(await loginRow(tenantId, theirs.id)).toEqual({ email: address, disabled: false });
    await hired(tenantId, address);
    await eraseEmployee(ports, person, metadata(tenantId, new Date().toISOString()));
    expect(await loginRow(tenantId, theirs.id)).toEqual({ email: address, disabled: false });
    expect(await keys.isDestroyed(tenantId, person)).toBe(true);
  });
});
