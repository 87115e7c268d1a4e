import { describe, expect, it } from 'vitest';
import { START, type EventStore, type ReadAllPage, type RecordedEvent } from '../../../shared/event-store/port.ts';
import { createSealingEventStore, MissingDataKeyError } from '../../../shared/event-store/sealing.ts';
import { startBulkOpener, type BulkOpener } from '../../../shared/personal-data/bulkOpener.ts';
import { makeDataKey, subjectRef, wrapContext, type DataKeyStore } from '../../../shared/personal-data/dataKeys.ts';
import { fieldPlace, sealValue } from '../../../shared/personal-data/fieldCipher.ts';
import { createKeyEncryptionKeys, generateKekEntry, parseKeyEncryptionKeys } from '../../../shared/personal-data/keyEncryptionKeys.ts';
import type { PersonalDataPolicy } from '../../../shared/personal-data/policy.ts';

/** A bulk read opened on the worker thread gives exactly what opening in-thread gives. */
const policy: PersonalDataPolicy = {
  fields: { Registered: ['email', 'name', 'nick'] },
  subjectOf: (streamId) => (streamId.startsWith('person-') ? { tenantId: 't', subjectId: streamId.slice(7) } : undefined),
};
const keks = createKeyEncryptionKeys(parseKeyEncryptionKeys(generateKekEntry()));

/** Data keys made with real KEKs, held in memory; `made` may mark a subject destroyed or drop its key. */
function memoryKeys() {
  const made = new Map<string, ReturnType<typeof makeDataKey> | 'destroyed'>();
  const subjectKey = (id: string) => {
    const key = made.get(`t/${id}`) ?? makeDataKey(keks, { tenantId: 't', subjectId: id });
    made.set(`t/${id}`, key);
    return key;
  };
  const keys: DataKeyStore = {
    forSealing: () => Promise.reject(new Error('not used')),
    load: async (subjects) =>
      new Map(
        subjects.flatMap((s) => {
          const m = made.get(subjectRef(s));
          return m ? [[subjectRef(s), m === 'destroyed' ? m : m.key] as const] : [];
        }),
      ),
    loadSealed: async (subjects) =>
      new Map(
        subjects.flatMap((s) => {
          const m = made.get(subjectRef(s));
          if (!m) return [];
          return [
            [
              subjectRef(s),
              m === 'destroyed' ? m : { keyId: m.key.keyId, kekId: m.kekId, sealed: m.sealed, context: wrapContext(s, m.key.keyId) },
            ] as const,
          ];
        }),
      ),
    destroy: () => Promise.reject(new Error('not used')),
    isDestroyed: async () => false,
  };
  const seal = (id: string, field: string, value: string) => {
    const m = subjectKey(id);
    if (m === 'destroyed') throw new Error('destroyed');
    return sealValue(m.key, value, fieldPlace('t', `person-${id}`, 'Registered', field));
  };
  return { made, keys, seal };
}

let position = 0;
const event = (streamId: string, data: Record<string, unknown>): RecordedEvent => ({
  id: `e${++position}`,
  streamId,
  revision: 0,
  type: 'Registered',
  data,
  metadata: {},
  position: { commit: BigInt(position), prepare: 0n },
  recordedAt: '2026-01-01T00:00:00.000Z',
});

const bulkStore = (pages: readonly ReadAllPage[], onEnd?: () => void) =>
  ({
    async *readAllBulk() {
      try {
        yield* pages;
      } finally {
        onEnd?.();
      }
    },
  }) as unknown as EventStore;

async function readAll(store: EventStore) {
  const out: Array<{ fields: string[]; data: unknown; redacted: boolean | undefined }> = [];
  for await (const page of store.readAllBulk?.() ?? [])
    for (const e of page.events) out.push({ fields: Object.keys(e.data as object), data: e.data, redacted: e.redacted });
  return out;
}

describe('a bulk read opened on a worker thread', () => {
  it('opens as in-thread: fields in order, clear and sealed values mixed, keys shared, pages, erased subjects', async () => {
    const { made, keys, seal } = memoryKeys();
    const events = [
      event('person-1', { nick: seal('1', 'nick', 'N'), email: 'clear@example.test', name: seal('1', 'name', 'Ann'), other: 1 }),
      event('person-1', { name: seal('1', 'name', 'Ann B'), email: seal('1', 'email', 'ann@example.test') }),
      event('other-1', { name: 'not personal here' }),
      event('person-2', { name: seal('2', 'name', 'Bob'), email: seal('2', 'email', 'bob@example.test') }),
      event('person-1', { other: 2 }),
    ];
    made.set('t/2', 'destroyed');
    const pages = [
      { events: events.slice(0, 2), checkpoint: START },
      { events: events.slice(2), checkpoint: START },
    ];
    const inThread = await readAll(createSealingEventStore(bulkStore(pages), { keys, policy }));
    expect(inThread[0]).toEqual({
      fields: ['nick', 'email', 'name', 'other'],
      data: { nick: 'N', email: 'clear@example.test', name: 'Ann', other: 1 },
      redacted: undefined,
    });
    expect(inThread[3]).toEqual({ fields: ['name', 'email'], data: { name: null, email: null }, redacted: true });
    expect(await readAll(createSealingEventStore(bulkStore(pages), { keys, policy, bulkOpener: () => startBulkOpener(keks) }))).toEqual(
      inThread,
    );
  });

  it('opens as in-thread when one page interleaves several live subjects, with fields skipped between', async () => {
    const { keys, seal } = memoryKeys();
    const events = [
      event('person-1', { name: seal('1', 'name', 'Ann'), email: null }),
      event('person-6', { email: seal('6', 'email', 'fay@example.test'), nick: 'clear' }),
      event('person-1', { nick: seal('1', 'nick', 'A'), name: seal('1', 'name', 'Ann C') }),
      event('person-6', { name: seal('6', 'name', 'Fay') }),
      { ...event('person-1', {}), data: 'not a record' },
    ];
    const pages = [{ events, checkpoint: START }];
    const inThread = await readAll(createSealingEventStore(bulkStore(pages), { keys, policy }));
    expect(inThread.map((e) => e.data)).toEqual([
      { name: 'Ann', email: null },
      { email: 'fay@example.test', nick: 'clear' },
      { nick: 'A', name: 'Ann C' },
      { name: 'Fay' },
      'not a record',
    ]);
    expect(await readAll(createSealingEventStore(bulkStore(pages), { keys, policy, bulkOpener: () => startBulkOpener(keks) }))).toEqual(
      inThread,
    );
  });

  it('fails as in-thread on a value moved to another field, and on a sealed value without a key', async () => {
    const { made, keys, seal } = memoryKeys();
    const moved = [event('person-3', { email: seal('3', 'name', 'Cy'), name: seal('3', 'name', 'Cy') })];
    const offThread = (pages: ReadAllPage[]) =>
      createSealingEventStore(bulkStore(pages), { keys, policy, bulkOpener: () => startBulkOpener(keks) });
    await expect(readAll(offThread([{ events: moved, checkpoint: START }]))).rejects.toThrow(/authenticate/);
    const orphan = [event('person-4', { name: seal('4', 'name', 'Di') })];
    made.delete('t/4');
    await expect(readAll(offThread([{ events: orphan, checkpoint: START }]))).rejects.toBeInstanceOf(MissingDataKeyError);
  });

  it('starts one thread per read and ends it, with the read below, when the caller stops early', async () => {
    const { keys, seal } = memoryKeys();
    let started = 0;
    let closed = 0;
    let innerEnded = false;
    const opener = (): BulkOpener => {
      started++;
      const thread = startBulkOpener(keks);
      return { open: (job) => thread.open(job), close: async () => (closed++, await thread.close()) };
    };
    const pages = Array.from({ length: 5 }, (_, i) => ({
      events: [event('person-5', { name: seal('5', 'name', `n${i}`) })],
      checkpoint: START,
    }));
    const store = createSealingEventStore(
      bulkStore(pages, () => (innerEnded = true)),
      { keys, policy, bulkOpener: opener },
    );
    for await (const page of store.readAllBulk?.() ?? []) {
      expect(page.events[0]?.data).toEqual({ name: 'n0' });
      break;
    }
    expect({ started, closed, innerEnded }).toEqual({ started: 1, closed: 1, innerEnded: true });
  });
});
