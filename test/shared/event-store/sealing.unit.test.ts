import { createSecretKey, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { EventStore, NewEvent, RecordedEvent } from '../../../shared/event-store/port.ts';
import { START } from '../../../shared/event-store/port.ts';
import { WrongExpectedRevisionError } from '../../../shared/errors.ts';
import { createSealingEventStore } from '../../../shared/event-store/sealing.ts';
import { subjectRef, type DataKeyStore, type DataSubject, type StoredKey } from '../../../shared/personal-data/dataKeys.ts';
import { isSealed, type DataKey } from '../../../shared/personal-data/fieldCipher.ts';
import type { PersonalDataPolicy } from '../../../shared/personal-data/policy.ts';

/** The sealing boundary's own rules, on an in-memory log and key store (the adapters' side is the contract suite). */
const policy: PersonalDataPolicy = {
  fields: { Registered: ['email', 'name'] },
  subjectOf: (streamId) => (streamId.startsWith('person-') ? { tenantId: 't', subjectId: streamId.slice(7) } : undefined),
};

function memoryKeys(): DataKeyStore & { stored: Map<string, StoredKey> } {
  const stored = new Map<string, StoredKey>();
  const key = (s: DataSubject): DataKey => ({ keyId: `key-${s.subjectId}`, key: createSecretKey(randomBytes(32)) });
  return {
    stored,
    forSealing: async (s) => {
      const found = stored.get(subjectRef(s)) ?? key(s);
      if (found === 'destroyed') throw new Error('erased');
      stored.set(subjectRef(s), found);
      return found;
    },
    load: async (subjects) =>
      new Map(subjects.flatMap((s) => (stored.has(subjectRef(s)) ? [[subjectRef(s), stored.get(subjectRef(s))!]] : []))),
    destroy: async (tenantId, subjectId) => {
      stored.set(subjectRef({ tenantId, subjectId }), 'destroyed');
      return { destroyedAt: '2026-01-01T00:00:00.000Z' };
    },
    isDestroyed: async (tenantId, subjectId) => stored.get(subjectRef({ tenantId, subjectId })) === 'destroyed',
  };
}

/** A log of recorded events; `reads` lets a test change what the next stream reads return. */
function memoryLog(): { store: EventStore; events: RecordedEvent[]; reads: Array<() => RecordedEvent[]> } {
  const events: RecordedEvent[] = [];
  const reads: Array<() => RecordedEvent[]> = [];
  const record = (streamId: string, e: NewEvent, revision: number): RecordedEvent => ({
    id: e.id,
    streamId,
    revision,
    type: e.type,
    data: e.data,
    metadata: e.metadata ?? {},
    position: { commit: BigInt(events.length + 1), prepare: 0n },
    recordedAt: '2026-01-01T00:00:00.000Z',
  });
  const store = {
    async append(streamId: string, news: readonly NewEvent[]) {
      for (const e of news) events.push(record(streamId, e, events.filter((x) => x.streamId === streamId).length));
      return { nextRevision: 0, position: START };
    },
    async readStream(streamId: string) {
      const next = reads.shift();
      return next ? next() : events.filter((e) => e.streamId === streamId);
    },
    async readAll() {
      return { events: [...events], checkpoint: START };
    },
  } as unknown as EventStore;
  return { store, events, reads };
}

const registered = (email: string, name: string): NewEvent => ({
  id: crypto.randomUUID(),
  type: 'Registered',
  data: { email, name, team: 'x' },
});

describe('the sealing boundary', () => {
  it('looks no key up, and makes none, for events of a personal type that carry no personal value', async () => {
    const log = memoryLog();
    const keys = memoryKeys();
    let asked = 0;
    const counted: DataKeyStore = { ...keys, forSealing: (s) => (asked++, keys.forSealing(s)) };
    const sealed = createSealingEventStore(log.store, { keys: counted, policy });
    const blank: NewEvent = { id: crypto.randomUUID(), type: 'Registered', data: { email: null, team: 'x' } };
    await sealed.append('person-9', [blank]);
    expect(asked).toBe(0);
    expect(keys.stored.size).toBe(0);
    expect(log.events[0]?.data).toEqual({ email: null, team: 'x' });
    await sealed.append('person-9', [registered('i@example.test', 'Ida')]);
    expect(asked).toBe(1);
  });

  it('hands the adapter sealed fields and its callers plain ones', async () => {
    const log = memoryLog();
    const sealed = createSealingEventStore(log.store, { keys: memoryKeys(), policy });
    await sealed.append('person-1', [registered('a@example.test', 'Ada')]);
    const stored = log.events[0]?.data as Record<string, unknown>;
    expect(isSealed(stored.email) && isSealed(stored.name)).toBe(true);
    expect(stored.team).toBe('x');
    expect((await sealed.readStream('person-1'))[0]?.data).toEqual({ email: 'a@example.test', name: 'Ada', team: 'x' });
    expect((await sealed.readAll()).events[0]?.data).toEqual({ email: 'a@example.test', name: 'Ada', team: 'x' });
  });

  it('passes on values written in the clear before sealing, and reads them null once the subject is erased', async () => {
    const log = memoryLog();
    const keys = memoryKeys();
    const sealed = createSealingEventStore(log.store, { keys, policy });
    await log.store.append('person-2', [registered('b@example.test', 'Bob')]);
    expect((await sealed.readStream('person-2'))[0]?.data).toEqual({ email: 'b@example.test', name: 'Bob', team: 'x' });
    await keys.destroy('t', '2', undefined as never);
    const [erased] = await sealed.readStream('person-2');
    expect(erased?.data).toEqual({ email: null, name: null, team: 'x' });
    expect(erased?.redacted).toBe(true);
  });

  it('reads a stream again when the key it looked up beside it was destroyed meanwhile', async () => {
    const log = memoryLog();
    const keys = memoryKeys();
    const sealed = createSealingEventStore(log.store, { keys, policy });
    await sealed.append('person-3', [registered('c@example.test', 'Cy')]);
    const before = [...log.events];
    await keys.destroy('t', '3', undefined as never);
    log.events.push({ ...before[0]!, id: 'erasure', type: 'Erased', data: {}, revision: 1 });
    // The first read ran before the erasure committed; the key lookup after the destruction.
    log.reads.push(() => before);
    const read = await sealed.readStream('person-3');
    expect(read.map((e) => e.type)).toEqual(['Registered', 'Erased']);
    expect(read[0]?.data).toEqual({ email: null, name: null, team: 'x' });
  });

  it('binds a sealed value to its field: moved to another field of the same subject, it does not open', async () => {
    const log = memoryLog();
    const sealed = createSealingEventStore(log.store, { keys: memoryKeys(), policy });
    await sealed.append('person-4', [registered('e@example.test', 'Eve')]);
    const stored = log.events[0]?.data as Record<string, unknown>;
    log.events[0] = { ...(log.events[0] as RecordedEvent), data: { ...stored, email: stored.name, name: stored.email } };
    await expect(sealed.readStream('person-4')).rejects.toThrow();
  });

  it('seals a value that only looks sealed, and passes on such a value found in the clear', async () => {
    const log = memoryLog();
    const sealed = createSealingEventStore(log.store, { keys: memoryKeys(), policy });
    await sealed.append('person-5', [registered('enc:A256GCM:a:b', 'enc:Mallory')]);
    const stored = log.events[0]?.data as Record<string, unknown>;
    expect(isSealed(stored.email) && isSealed(stored.name)).toBe(true);
    expect((await sealed.readStream('person-5'))[0]?.data).toEqual({ email: 'enc:A256GCM:a:b', name: 'enc:Mallory', team: 'x' });
    await log.store.append('person-6', [registered('f@example.test', 'enc:Mallory')]);
    expect((await sealed.readStream('person-6'))[0]?.data).toEqual({ email: 'f@example.test', name: 'enc:Mallory', team: 'x' });
  });

  it('looks the key up again when a stream read beside the lookup holds values sealed with a key it missed', async () => {
    const log = memoryLog();
    const keys = memoryKeys();
    const sealed = createSealingEventStore(log.store, { keys, policy });
    await sealed.append('person-7', [registered('g@example.test', 'Gus')]);
    // The lookup ran just before the key committed; the stream read just after the event did.
    let loads = 0;
    const late: DataKeyStore = { ...keys, load: async (subjects) => (loads++ === 0 ? new Map() : keys.load(subjects)) };
    const racing = createSealingEventStore(log.store, { keys: late, policy });
    expect((await racing.readStream('person-7'))[0]?.data).toEqual({ email: 'g@example.test', name: 'Gus', team: 'x' });
    expect(loads).toBe(2);
  });

  it('drops the cached keys of an append that failed, the command refused included', async () => {
    const log = memoryLog();
    const forgotten: string[] = [];
    const keys = { ...memoryKeys(), forget: (subjects: readonly DataSubject[]) => forgotten.push(...subjects.map(subjectRef)) };
    const sealed = createSealingEventStore(log.store, { keys, policy });
    const failing = (error: Error) => {
      log.store.append = async () => {
        throw error;
      };
    };
    failing(new WrongExpectedRevisionError('person-8', '0', 1));
    await expect(sealed.append('person-8', [registered('h@example.test', 'Hal')])).rejects.toThrow(WrongExpectedRevisionError);
    expect(forgotten).toEqual(['t/8']);
    failing(new Error('Connection terminated unexpectedly'));
    await expect(sealed.append('person-8', [registered('h@example.test', 'Hal')])).rejects.toThrow(/Connection/);
    expect(forgotten).toEqual(['t/8', 't/8']);
  });

  it('deciphers an event once for the live subscribers that share it, each looking the key up afresh', async () => {
    const log = memoryLog();
    const keys = memoryKeys();
    let lookups = 0;
    const counted: DataKeyStore = { ...keys, load: (subjects) => (lookups++, keys.load(subjects)) };
    await createSealingEventStore(log.store, { keys, policy }).append('person-7', [registered('g@example.test', 'Gus')]);
    // The shared tail hands every subscriber of a process the same event objects.
    const page = await log.store.readAll();
    const tail = {
      ...log.store,
      async *subscribeToAll() {
        yield page;
      },
    } as EventStore;
    const boundary = createSealingEventStore(tail, { keys: counted, policy });
    const firstOf = async () => {
      for await (const p of boundary.subscribeToAll({ after: START })) return p.events[0];
      return undefined;
    };
    const first = await firstOf();
    expect(first?.data).toEqual({ email: 'g@example.test', name: 'Gus', team: 'x' });
    // The second subscriber gets the very event the first opened, after its own lookup.
    expect(await firstOf()).toBe(first);
    expect(lookups).toBe(2);
    // Once the key is destroyed, the next subscriber's lookup says so and nothing is handed on.
    await keys.destroy('t', '7', undefined as never);
    const after = await firstOf();
    expect(after?.data).toEqual({ email: null, name: null, team: 'x' });
    expect(after?.redacted).toBe(true);
    expect(lookups).toBe(3);
  });

  it('refuses personal fields on a stream without a subject', async () => {
    const sealed = createSealingEventStore(memoryLog().store, { keys: memoryKeys(), policy });
    await expect(sealed.append('other-1', [registered('d@example.test', 'Di')])).rejects.toThrow(/without a data subject/);
  });
});
