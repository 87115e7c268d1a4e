import { createHash, randomUUID } from 'node:crypto';
import { monotonicFactory } from 'ulid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { hireEmployee } from '../../../services/employees/commands.ts';
import { employeePersonalData, employeeStreamId, normaliseEmail } from '../../../services/employees/contract.ts';
import { emailReservationStreamId } from '../../../services/employees/emailReservation.ts';
import { sql } from '../../../shared/db/pool.ts';
import { ConflictError } from '../../../shared/errors.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore, NewEvent } from '../../../shared/event-store/port.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { sealedEventStore, testEmailHash, testPersonalDataEnv } from '../../support/personalData.ts';
import { createDataKeyStore, type DataKeyStore } from '../../../shared/personal-data/dataKeys.ts';
import { createKeyEncryptionKeys, generateKekEntry, parseKeyEncryptionKeys } from '../../../shared/personal-data/keyEncryptionKeys.ts';
import { createSealingEventStore } from '../../../shared/event-store/sealing.ts';
import { sealExistingEvents } from '../../../shared/event-store/postgres/sealExisting.ts';
import { runOps, runOpsWith } from '../../support/processes.ts';

/**
 * `ops privacy seal-existing` on a log written in the clear, as the service wrote it before
 * sealing: events with addresses and names, reservation streams named by a plain SHA-256 of the
 * address with the address in their events (real PostgreSQL, the real CLI).
 */
const nextId = monotonicFactory();
let db: TestDatabase;
let raw: EventStore;
let sealed: EventStore;
let keys: DataKeyStore;

beforeAll(async () => {
  db = await createTestDatabase();
  raw = createPostgresEventStore(db.pool);
  ({ store: sealed, keys } = sealedEventStore(raw, db.pool));
});
afterAll(async () => {
  await sealed?.close();
  await db?.drop();
});

const tag = () => randomUUID().slice(0, 8);
const event = (type: string, data: Record<string, unknown>, tenantId: string): NewEvent => ({
  id: randomUUID(),
  type,
  data,
  metadata: { tenantId, actor: 'older-service', occurredAt: new Date().toISOString() },
});
const legacyReservationId = (tenantId: string, email: string) =>
  `employee-email-${tenantId}-${createHash('sha256').update(normaliseEmail(email)).digest('hex')}`;

describe('when the log holds personal data in the clear', () => {
  it('seals it in place once, converts the reservations, and leaves every read as it was', async () => {
    const tenantId = randomUUID();
    const [ada, bob] = [nextId(), nextId()];
    const adaFirst = { email: `Ada.${tag()}@example.test`, firstName: `Ada${tag()}`, lastName: `Lovelace${tag()}` };
    const adaEmail = `countess.${tag()}@example.test`;
    const adaLastName = `King${tag()}`;
    // Bob's last name was typed in the sealed form: erased, it must go like the rest.
    const bobFirst = { email: `bob.${tag()}@example.test`, firstName: `Bob${tag()}`, lastName: `enc:A256GCM:k:${'B'.repeat(40)}${tag()}` };
    const adaLeave = { employeeId: ada, from: 'active', to: 'on_leave', reason: `Leave${tag()}`, changedAt: '2021-01-01T00:00:00.000Z' };
    const hired = (id: string, p: typeof adaFirst) =>
      event('EmployeeHired', { employeeId: id, ...p, department: 'r&d', status: 'active', hiredAt: '2020-01-01T00:00:00.000Z' }, tenantId);
    await raw.append(employeeStreamId(tenantId, ada), [
      hired(ada, adaFirst),
      event('EmployeeEmailChanged', { employeeId: ada, email: adaEmail, previousEmail: adaFirst.email }, tenantId),
      event('EmployeeDetailsChanged', { employeeId: ada, lastName: adaLastName }, tenantId),
      event('EmployeeStatusChanged', adaLeave, tenantId),
    ]);
    await raw.append(legacyReservationId(tenantId, adaFirst.email), [
      event('EmployeeEmailReserved', { employeeId: ada, email: normaliseEmail(adaFirst.email) }, tenantId),
      event('EmployeeEmailReleased', { employeeId: ada }, tenantId),
    ]);
    await raw.append(legacyReservationId(tenantId, adaEmail), [
      event('EmployeeEmailReserved', { employeeId: ada, email: normaliseEmail(adaEmail) }, tenantId),
    ]);
    // Erased before the migration ran: its key is destroyed, its events still clear.
    await raw.append(employeeStreamId(tenantId, bob), [hired(bob, bobFirst)]);
    await db.pool.transaction((tx) => keys.destroy(tenantId, bob, tx));
    const clear = [
      adaFirst.email,
      adaEmail,
      adaFirst.firstName,
      adaFirst.lastName,
      adaLastName,
      adaLeave.reason,
      ...Object.values(bobFirst),
    ];
    const plainHashes = [adaFirst.email, adaEmail].map((e) => createHash('sha256').update(normaliseEmail(e)).digest('hex'));
    const positionsBefore = await storedRows();
    expect(positionsBefore.join('\n')).toContain(adaFirst.email);

    const first = await runOps(db.url, 'privacy', 'seal-existing', '--batch-size', '2');
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toContain('reservations: 2 converted, 0 dropped; events: 4 sealed, 1 redacted');

    const log = (await storedRows()).join('\n').toLowerCase();
    for (const value of [...clear, ...plainHashes]) expect(log).not.toContain(value.toLowerCase());
    // Same events at the same places: only payloads and the reservations' names changed.
    expect((await storedRows()).length).toBe(positionsBefore.length);

    const adaEvents = await sealed.readStream(employeeStreamId(tenantId, ada));
    expect(adaEvents.map((e) => e.data)).toEqual([
      { employeeId: ada, ...adaFirst, department: 'r&d', status: 'active', hiredAt: '2020-01-01T00:00:00.000Z' },
      { employeeId: ada, email: adaEmail, previousEmail: adaFirst.email },
      { employeeId: ada, lastName: adaLastName },
      adaLeave,
    ]);
    const [bobHired] = await sealed.readStream(employeeStreamId(tenantId, bob));
    expect(bobHired?.data).toMatchObject({ email: null, firstName: null, lastName: null, department: 'r&d' });
    expect(bobHired?.redacted).toBe(true);

    const reservation = (email: string) => sealed.readStream(emailReservationStreamId(testEmailHash, tenantId, email));
    expect((await reservation(adaFirst.email)).map((e) => [e.type, e.data])).toEqual([
      ['EmployeeEmailReserved', { employeeId: ada }],
      ['EmployeeEmailReleased', { employeeId: ada }],
    ]);
    expect((await reservation(adaEmail)).map((e) => e.data)).toEqual([{ employeeId: ada }]);
    // Uniqueness held across the conversion: Ada's address is still hers.
    const ports = { store: sealed, assertRoleExists: async () => undefined, emailHash: testEmailHash };
    const hire = (email: string) =>
      hireEmployee(ports, {
        type: 'HireEmployee',
        data: { employeeId: nextId(), email, firstName: 'New', lastName: 'Hire' },
        metadata: { tenantId, actor: 'spec', now: new Date().toISOString() },
      });
    await expect(hire(adaEmail.toUpperCase())).rejects.toBeInstanceOf(ConflictError);
    await expect(hire(adaFirst.email)).resolves.toMatchObject({ revision: 0 });

    const again = await runOps(db.url, 'privacy', 'seal-existing');
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain('reservations: 0 converted, 0 dropped; events: 0 sealed, 0 redacted');
  });
});

const hiredEvent = (tenantId: string, id: string, p: { email: string; firstName: string; lastName: string }) =>
  event('EmployeeHired', { employeeId: id, ...p, department: 'r&d', status: 'active', hiredAt: '2020-01-01T00:00:00.000Z' }, tenantId);

const hireAs = (tenantId: string, email: string) =>
  hireEmployee(
    { store: sealed, assertRoleExists: async () => undefined, emailHash: testEmailHash },
    {
      type: 'HireEmployee',
      data: { employeeId: nextId(), email, firstName: 'New', lastName: 'Hire' },
      metadata: { tenantId, actor: 'spec', now: new Date().toISOString() },
    },
  );

describe('when clear values look sealed, or have no data subject', () => {
  it('seals what does not open in its place, reports what it cannot seal, and fails while clear data is left', async () => {
    const tenantId = randomUUID();
    const id = nextId();
    // Typed by users before sealing existed: one looks like a sealed value, one has its full form but opens nowhere.
    const lookalike = `enc:A256GCM:k:${'A'.repeat(40)}`;
    const person = { email: `m.${tag()}@example.test`, firstName: 'enc:Mallory', lastName: lookalike };
    await raw.append(employeeStreamId(tenantId, id), [hiredEvent(tenantId, id, person)]);
    const stray = `employee-import-${randomUUID()}`;
    await raw.append(stray, [hiredEvent(tenantId, nextId(), { email: `s.${tag()}@example.test`, firstName: 'Stray', lastName: 'Row' })]);

    const run = await runOps(db.url, 'privacy', 'seal-existing', '--batch-size', '1');
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(/^skipped\t\d+\/\d+$/m);
    expect(run.stdout).toContain('1 skipped');
    expect(run.stderr).toContain('1 events still hold personal data in the clear');

    const stored = JSON.stringify(
      await db.pool.oneFirst(sql.type(z.object({ data: z.unknown() }))`
      select data from es_events where stream_id = ${employeeStreamId(tenantId, id)}
    `),
    );
    for (const clear of [person.email, 'Mallory', lookalike]) expect(stored).not.toContain(clear);
    expect((await sealed.readStream(employeeStreamId(tenantId, id)))[0]?.data).toMatchObject(person);
    await db.pool.query(sql.type(z.object({}))`delete from es_events where stream_id = ${stray}`);
  });
});

describe('before the reservations are converted', () => {
  it('keeps an address reserved under the first form taken', async () => {
    const tenantId = randomUUID();
    const holder = nextId();
    const email = `held.${tag()}@example.test`;
    await raw.append(employeeStreamId(tenantId, holder), [hiredEvent(tenantId, holder, { email, firstName: 'Held', lastName: 'Before' })]);
    await raw.append(legacyReservationId(tenantId, email), [
      event('EmployeeEmailReserved', { employeeId: holder, email: normaliseEmail(email) }, tenantId),
    ]);
    await expect(hireAs(tenantId, email.toUpperCase())).rejects.toBeInstanceOf(ConflictError);
    // Released under the first form: free again, and the hire holds it there until converted.
    await raw.append(legacyReservationId(tenantId, email), [event('EmployeeEmailReleased', { employeeId: holder }, tenantId)]);
    await expect(hireAs(tenantId, email)).resolves.toMatchObject({ revision: 0 });
    await expect(hireAs(tenantId, email)).rejects.toBeInstanceOf(ConflictError);
  });
});

describe('when a sealed employee has no key row any more (a key table restored older than the log)', () => {
  it('leaves their events as they are and reports them, instead of sealing their sealed values again under a new key', async () => {
    const tenantId = randomUUID();
    const id = nextId();
    const streamId = employeeStreamId(tenantId, id);
    await sealed.append(streamId, [hiredEvent(tenantId, id, { email: `lost.${tag()}@example.test`, firstName: 'Lost', lastName: 'Key' })]);
    // An event of the older version, in the clear, lands after it; then the key row goes.
    const clearName = `Clear${tag()}`;
    await raw.append(streamId, [event('EmployeeDetailsChanged', { employeeId: id, lastName: clearName }, tenantId)]);
    await db.pool.query(sql.type(z.object({}))`delete from personal_data_keys where subject_id = ${id}`);
    const before = await streamRows(streamId);

    const run = await runOps(db.url, 'privacy', 'seal-existing');
    expect(run.code).toBe(1);
    expect(run.stdout.match(/^skipped\t\d+\/\d+$/gm)).toHaveLength(2);
    expect(run.stderr).toContain('a data key the key table no longer has');
    expect(await streamRows(streamId)).toEqual(before);
    const keyRows = await db.pool.oneFirst(sql.type(z.object({ n: z.number() }))`
      select count(*)::int4 as n from personal_data_keys where subject_id = ${id}
    `);
    expect(keyRows).toBe(0);
    await db.pool.query(sql.type(z.object({}))`delete from es_events where stream_id = ${streamId}`);
  });
});

describe('when the key-encryption key is rotated', () => {
  it('re-seals every data key under the new one, after which the old one is no longer needed', async () => {
    const subject = { tenantId: randomUUID(), subjectId: nextId() };
    const streamId = employeeStreamId(subject.tenantId, subject.subjectId);
    const data = { employeeId: subject.subjectId, email: `r.${tag()}@example.test`, firstName: 'Rosalind', lastName: 'Franklin' };
    await sealed.append(streamId, [event('EmployeeHired', data, subject.tenantId)]);
    const newEntry = generateKekEntry();
    const newOnly = createDataKeyStore(db.pool, createKeyEncryptionKeys(parseKeyEncryptionKeys(newEntry)));
    await expect(newOnly.load([subject])).rejects.toThrow(/not configured/);

    const env = { ...process.env, ...testPersonalDataEnv, DATABASE_URL: db.url, LOG_LEVEL: 'warn' };
    const rotated = await runOpsWith(
      { ...env, KEY_ENCRYPTION_KEY: `${newEntry},${testPersonalDataEnv.KEY_ENCRYPTION_KEY}` },
      'privacy',
      'rewrap-keys',
    );
    expect(rotated.code, rotated.stderr).toBe(0);
    expect(rotated.stdout).toMatch(/^\d+ data keys now sealed under k/m);

    const reopened = createSealingEventStore(raw, { keys: newOnly, policy: employeePersonalData });
    expect((await reopened.readStream(streamId))[0]?.data).toEqual(data);

    // A key left under the old KEK (here: locked by an erasure in flight) is named, and the run fails.
    const late = { tenantId: randomUUID(), subjectId: nextId() };
    await sealed.append(employeeStreamId(late.tenantId, late.subjectId), [
      event('EmployeeHired', { ...data, employeeId: late.subjectId, email: `l.${tag()}@example.test` }, late.tenantId),
    ]);
    const oldId = parseKeyEncryptionKeys(testPersonalDataEnv.KEY_ENCRYPTION_KEY)[0]?.id;
    const blocked = await db.pool.transaction(async (tx) => {
      await tx.query(sql.type(z.object({}))`select 1 from personal_data_keys where subject_id = ${late.subjectId} for update`);
      return runOpsWith({ ...env, KEY_ENCRYPTION_KEY: `${newEntry},${testPersonalDataEnv.KEY_ENCRYPTION_KEY}` }, 'privacy', 'rewrap-keys');
    });
    expect(blocked.code).toBe(1);
    expect(blocked.stdout).toContain(`still sealed under ${oldId}\t1`);
    expect(blocked.stderr).toContain('still sealed under older key-encryption keys');
  });
});

describe('when a person is erased while the rewrite makes their key', () => {
  it("nulls their fields as any erased person's instead of failing the run", async () => {
    // A database of its own: the rewrite reads the whole log, and the others' keys here were
    // rotated to a key-encryption key this process does not hold.
    const own = await createTestDatabase();
    const log = createPostgresEventStore(own.pool);
    const { store, keys: ownKeys } = sealedEventStore(log, own.pool);
    try {
      const tenantId = randomUUID();
      const erased = nextId();
      const name = `Late${tag()}`;
      const streamId = employeeStreamId(tenantId, erased);
      const data = { employeeId: erased, email: `late.${tag()}@example.test`, firstName: name, lastName: name };
      await log.append(streamId, [
        event('EmployeeHired', { ...data, department: 'r&d', status: 'active', hiredAt: '2020-01-01T00:00:00.000Z' }, tenantId),
      ]);
      // The erasure commits between the rewrite's look-up (no key yet) and the key it makes.
      const racing: DataKeyStore = {
        ...ownKeys,
        forSealing: async (subject) => {
          if (subject.subjectId === erased) await own.pool.transaction((tx) => ownKeys.destroy(tenantId, erased, tx));
          return ownKeys.forSealing(subject);
        },
      };
      const progress = await sealExistingEvents(own.pool, racing, employeePersonalData);
      expect(progress).toMatchObject({ sealed: 0, redacted: 1 });
      const [row] = await own.pool.anyFirst(
        sql.type(z.object({ data: z.string() }))`select data::text as data from es_events where stream_id = ${streamId}`,
      );
      expect(row).not.toContain(name);
      expect(JSON.parse(row ?? '{}')).toMatchObject({ email: null, firstName: null, lastName: null });
    } finally {
      await store.close();
      await own.drop();
    }
  });
});

const streamRows = (streamId: string) =>
  db.pool.anyFirst(
    sql.type(z.object({ data: z.string() }))`select data::text as data from es_events where stream_id = ${streamId} order by revision`,
  );

async function storedRows(): Promise<readonly string[]> {
  return db.pool.anyFirst(sql.type(z.object({ row: z.string() }))`
    select position::text || ' ' || stream_id || ' ' || data::text as row from es_events order by position
  `);
}
