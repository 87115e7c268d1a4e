import { randomUUID } from 'node:crypto';
import { ulid } from 'ulid';
import { expect, it } from 'vitest';
import type { DatabasePool } from '../../../shared/db/pool.ts';
import { START, comparePositions, type EventStore, type NewEvent, type RecordedEvent } from '../../../shared/event-store/port.ts';
import { createSealingEventStore } from '../../../shared/event-store/sealing.ts';
import { startBulkOpener } from '../../../shared/personal-data/bulkOpener.ts';
import { createDataKeyStore, type DataKeyStore } from '../../../shared/personal-data/dataKeys.ts';
import { createKeyEncryptionKeys, generateKekEntry, parseKeyEncryptionKeys } from '../../../shared/personal-data/keyEncryptionKeys.ts';
import type { PersonalDataPolicy } from '../../../shared/personal-data/policy.ts';
import { closingKeysToo } from '../personalData.ts';

/**
 * The sealing part of the event-store contract: the adapter behind the sealing boundary stores
 * personal fields only sealed, whichever way they were appended, and every read opens them (or,
 * once the subject's key is destroyed, reads them as redacted). What the adapter stored is read
 * beside the port, from the engine itself (`storedData`), so a read path that opened values
 * cannot hide a clear one.
 */
export type SealingFixture = {
  /** The events' `data` of a stream exactly as the engine holds them (SQL, or the raw client). */
  storedData(streamId: string): Promise<unknown[]>;
  /**
   * Everything the engine holds of the stream's events, every column or field (ids, type,
   * metadata, positions, data), as text: a clear value kept anywhere beside `data` shows here.
   */
  storedText(streamId: string): Promise<string>;
  /** The PostgreSQL database the data keys live in. */
  readonly keysPool: DatabasePool;
};

/** Streams `person-<tenant>-<subject>` hold one data subject's `PersonRegistered` and `PersonRenamed` events. */
const policy: PersonalDataPolicy = {
  fields: { PersonRegistered: ['email', 'name'], PersonRenamed: ['name'] },
  subjectOf(streamId) {
    const match = /^person-([0-9a-f-]{36})-([0-9A-Z]{26})$/.exec(streamId);
    return match?.[1] && match[2] ? { tenantId: match[1], subjectId: match[2] } : undefined;
  },
};

export function sealedContractStore(inner: EventStore, keysPool: DatabasePool): { store: EventStore; keys: DataKeyStore } {
  const keks = createKeyEncryptionKeys(parseKeyEncryptionKeys(generateKekEntry()));
  const keys = createDataKeyStore(keysPool, keks);
  // As the service runs it: bulk reads open on a worker thread.
  return { store: closingKeysToo(createSealingEventStore(inner, { keys, policy, bulkOpener: () => startBulkOpener(keks) }), keys), keys };
}

const person = () => {
  const tenantId = randomUUID();
  const subjectId = ulid();
  const tag = randomUUID().slice(0, 8);
  return {
    tenantId,
    subjectId,
    streamId: `person-${tenantId}-${subjectId}`,
    email: `grace-${tag}@example.test`,
    name: `Grace Hopper ${tag}`,
    newName: `Grace B. Hopper ${tag}`,
  };
};

const registered = (p: ReturnType<typeof person>): NewEvent => ({
  id: randomUUID(),
  type: 'PersonRegistered',
  data: { personId: p.subjectId, email: p.email, name: p.name, team: 'compilers' },
  metadata: { actor: 'contract-test' },
});
const renamed = (p: ReturnType<typeof person>): NewEvent => ({
  id: randomUUID(),
  type: 'PersonRenamed',
  data: { personId: p.subjectId, name: p.newName },
  metadata: { actor: 'contract-test' },
});

async function readAllOf(store: EventStore, streamId: string, after = START): Promise<RecordedEvent[]> {
  const seen: RecordedEvent[] = [];
  let position = after;
  for (;;) {
    const page = await store.readAll({ after: position, maxCount: 500 });
    seen.push(...page.events.filter((e) => e.streamId === streamId));
    if (comparePositions(page.checkpoint, position) === 0) return seen;
    position = page.checkpoint;
  }
}

async function bulkOf(store: EventStore, streamId: string, after = START): Promise<RecordedEvent[] | undefined> {
  if (!store.readAllBulk) return undefined;
  const seen: RecordedEvent[] = [];
  for await (const page of store.readAllBulk({ after, pageSize: 2 })) seen.push(...page.events.filter((e) => e.streamId === streamId));
  return seen;
}

async function subscribedOf(store: EventStore, streamId: string, after: typeof START, count: number): Promise<RecordedEvent[]> {
  const controller = new AbortController();
  const seen: RecordedEvent[] = [];
  for await (const page of store.subscribeToAll({ after, signal: controller.signal, pollIntervalMs: 50 })) {
    seen.push(...page.events.filter((e) => e.streamId === streamId));
    if (seen.length >= count) controller.abort();
  }
  return seen;
}

const plainData = (e: RecordedEvent) => e.data as Record<string, unknown>;

/** Registers the tests; `get` gives the fixture's sealed store once its beforeAll has run. */
export function sealingContract(get: () => { store: EventStore; keys: DataKeyStore; fixture: SealingFixture }): void {
  it('stores personal fields only sealed, on append and on appendMany, and opens them on every read', async () => {
    const { store, fixture } = get();
    const head = await store.headPosition();
    const [a, b] = [person(), person()];
    await store.append(a.streamId, [registered(a)], { expectedRevision: 'no_stream' });
    await store.appendMany([
      { streamId: b.streamId, events: [registered(b), renamed(b)], expectedRevision: 'no_stream' },
      { streamId: `contract_other-${randomUUID()}`, events: [{ id: randomUUID(), type: 'Unrelated', data: { n: 1 } }] },
    ]);
    await store.append(a.streamId, [renamed(a)], { expectedRevision: 0 });

    for (const p of [a, b]) {
      const stored = await fixture.storedData(p.streamId);
      expect(stored).toHaveLength(2);
      const text = `${JSON.stringify(stored)}\n${await fixture.storedText(p.streamId)}`;
      expect(text).toContain(p.subjectId);
      for (const clear of [p.email, p.name, p.newName, 'Grace']) expect(text).not.toContain(clear);
      const [first, second] = stored as Array<Record<string, unknown>>;
      expect(first).toMatchObject({ personId: p.subjectId, team: 'compilers' });
      for (const value of [first?.email, first?.name, second?.name]) expect(value).toMatch(/^enc:A256GCM:[^:]+:[A-Za-z0-9_-]+$/);

      const expected = [
        { personId: p.subjectId, email: p.email, name: p.name, team: 'compilers' },
        { personId: p.subjectId, name: p.newName },
      ];
      expect((await store.readStream(p.streamId)).map(plainData)).toEqual(expected);
      expect((await readAllOf(store, p.streamId, head)).map(plainData)).toEqual(expected);
      expect((await subscribedOf(store, p.streamId, head, 2)).map(plainData)).toEqual(expected);
      const bulk = await bulkOf(store, p.streamId, head);
      if (bulk) expect(bulk.map(plainData)).toEqual(expected);
    }
  });

  it('reads the personal fields of an erased subject as redacted, and keeps the rest', async () => {
    const { store, keys, fixture } = get();
    const head = await store.headPosition();
    const p = person();
    await store.append(p.streamId, [registered(p), renamed(p)]);
    await fixture.keysPool.transaction((tx) => keys.destroy(p.tenantId, p.subjectId, tx));

    const redacted = [
      { personId: p.subjectId, email: null, name: null, team: 'compilers' },
      { personId: p.subjectId, name: null },
    ];
    for (const events of [
      await store.readStream(p.streamId),
      await readAllOf(store, p.streamId, head),
      await subscribedOf(store, p.streamId, head, 2),
    ]) {
      expect(events.map(plainData)).toEqual(redacted);
      expect(events.map((e) => e.redacted)).toEqual([true, true]);
    }
    const bulk = await bulkOf(store, p.streamId, head);
    if (bulk) expect(bulk.map(plainData)).toEqual(redacted);
    await expect(store.append(p.streamId, [renamed(p)])).rejects.toThrow(/erased/);
  });

  it('seals values that look sealed like any other, so they round-trip and never reach the engine in the clear', async () => {
    const { store, fixture } = get();
    const head = await store.headPosition();
    const p = { ...person(), name: 'enc:x', newName: 'enc:A256GCM:a:b' };
    await store.append(p.streamId, [registered(p), renamed(p)], { expectedRevision: 'no_stream' });

    const stored = (await fixture.storedData(p.streamId)) as Array<Record<string, unknown>>;
    for (const value of [stored[0]?.name, stored[1]?.name]) {
      expect(value).toMatch(/^enc:A256GCM:[^:]+:[A-Za-z0-9_-]{38,}$/);
      expect(value).not.toContain('enc:x');
    }
    const expected = [
      { personId: p.subjectId, email: p.email, name: 'enc:x', team: 'compilers' },
      { personId: p.subjectId, name: 'enc:A256GCM:a:b' },
    ];
    expect((await store.readStream(p.streamId)).map(plainData)).toEqual(expected);
    expect((await readAllOf(store, p.streamId, head)).map(plainData)).toEqual(expected);
  });

  it('refuses personal data on a stream that has no data subject instead of storing it in the clear', async () => {
    const { store, fixture } = get();
    const streamId = `contract_nosubject-${randomUUID()}`;
    await expect(store.append(streamId, [registered(person())])).rejects.toThrow(/without a data subject/);
    expect(await fixture.storedData(streamId)).toEqual([]);
  });
}
