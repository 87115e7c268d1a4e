import type { BulkOpener } from '../personal-data/bulkOpener.ts';
import { subjectRef, type DataKeyStore, type DataSubject, type SealedDataKey, type StoredKey } from '../personal-data/dataKeys.ts';
import { fieldPlace, isSealed, openValue, sealValue, type DataKey } from '../personal-data/fieldCipher.ts';
import { withFieldsNull, type PersonalDataPolicy } from '../personal-data/policy.ts';
import type { AppendRequest, EventStore, NewEvent, ReadAllPage, RecordedEvent } from './port.ts';

/**
 * The sealing boundary: an event store whose adapter below (PostgreSQL or KurrentDB) only ever
 * stores personal fields sealed, each with its data subject's own key, while callers above
 * (deciders, projections, the history endpoint) see plain values.
 *
 * - Writes: an event of a type the policy names has those fields sealed with the key of the
 *   stream's subject (made on the subject's first value). A stream with personal events but no
 *   subject is refused rather than stored in the clear.
 * - Reads: a stream's fields open with one key lookup, made beside the read; a page of the log
 *   with one lookup for all the subjects in it; a bulk read (rebuilds) looks the next page's
 *   keys up, and opens it on a worker thread when given one, while the caller folds the current
 *   one. Keys for opening are always read afresh, so a destroyed key opens nothing once its
 *   destruction committed (dataKeys.ts); live subscribers of one process decipher a shared
 *   event once.
 * - Every personal string is sealed on write, whatever it looks like (a first name `enc:x` too),
 *   bound to its place (tenant, stream, event type, field: fieldPlace), so a sealed value opens
 *   only in that field of that stream's events of that type.
 * - An erased subject (key destroyed): its personal fields read `null` and the event carries
 *   `redacted: true`; values still in the clear from before sealing existed read `null` too.
 * - A value found in the clear (written before sealing; anything without the full sealed form)
 *   is passed on as it is, so the service runs on a log `ops privacy seal-existing` has not
 *   rewritten yet.
 */
/**
 * An event holds sealed fields but its data subject has no key at all (a restored database whose
 * key table is older than the log): nothing can open them. Readers that only need what is not
 * personal read the inner store instead; an erasure treats the subject as already shredded.
 */
export class MissingDataKeyError extends Error {
  override readonly name = 'MissingDataKeyError';
}

export type SealingOptions = {
  readonly keys: DataKeyStore;
  readonly policy: PersonalDataPolicy;
  /** Opens a bulk read's pages on another thread (bulkOpener.ts); without it, in-thread. */
  readonly bulkOpener?: () => BulkOpener;
};

type KeyOf = (streamId: string) => StoredKey | undefined;

export function createSealingEventStore(inner: EventStore, { keys, policy, bulkOpener }: SealingOptions): EventStore {
  const personal = (type: string): readonly string[] | undefined => policy.fields[type];

  /** Whether the event holds a personal value to seal: most status changes, say, give no reason. */
  const holdsPersonal = (e: NewEvent): boolean => {
    const data = e.data;
    return isRecord(data) && (personal(e.type) ?? []).some((f) => data[f] !== undefined && data[f] !== null);
  };

  async function sealEvents(streamId: string, events: readonly NewEvent[]): Promise<readonly NewEvent[]> {
    // No key is looked up, nor made, for events with nothing to seal.
    if (!events.some(holdsPersonal)) return events;
    const subject = policy.subjectOf(streamId);
    if (!subject) throw new Error(`events with personal data appended to ${streamId}, a stream without a data subject`);
    const key = await keys.forSealing(subject);
    return events.map((e) => {
      const fields = personal(e.type);
      return fields ? { ...e, data: sealData(key, e.data, fields, (f) => fieldPlace(subject.tenantId, streamId, e.type, f)) } : e;
    });
  }

  function openEvent(event: RecordedEvent, keyOf: KeyOf): RecordedEvent {
    const fields = personal(event.type);
    if (!fields || !isRecord(event.data)) return event;
    const data = event.data;
    if (!fields.some((f) => data[f] !== undefined)) return event;
    const key = keyOf(event.streamId);
    if (key === 'destroyed') return withData(event, withFieldsNull(data, fields), true);
    if (!fields.some((f) => isSealed(data[f]))) return event;
    if (key === undefined) throw new MissingDataKeyError(`event ${event.id} holds sealed fields but its subject has no data key`);
    const tenantId = policy.subjectOf(event.streamId)?.tenantId ?? '';
    const opened: Record<string, unknown> = { ...data };
    for (const field of fields) {
      const value = data[field];
      if (isSealed(value)) opened[field] = openValue(key, value, fieldPlace(tenantId, event.streamId, event.type, field));
    }
    return withData(event, opened, false);
  }

  function holdsSealed(event: RecordedEvent): boolean {
    const data = event.data;
    return isRecord(data) && (personal(event.type) ?? []).some((f) => isSealed(data[f]));
  }

  /** The subjects of the page's personal events, keyed by stream (a page holds many events of few streams). */
  function subjectsOf(events: readonly RecordedEvent[]): Map<string, DataSubject> {
    const byStream = new Map<string, DataSubject>();
    const without = new Set<string>();
    for (const event of events) {
      if (personal(event.type) === undefined || byStream.has(event.streamId) || without.has(event.streamId)) continue;
      const subject = policy.subjectOf(event.streamId);
      if (subject) byStream.set(event.streamId, subject);
      else without.add(event.streamId);
    }
    return byStream;
  }

  // The subscriptions of one process that follow the head share the pages they read (the event
  // objects are the same): an event opened for one is handed opened to the others, instead of
  // each deciphering it again. Each still looks the keys up afresh, and takes the opened event
  // only when that lookup gives the very key it was opened with (the key store hands out one
  // object per stored key): once the key is destroyed, the event reads redacted, as ever.
  const sharedOpenings = new WeakMap<RecordedEvent, { readonly event: RecordedEvent; readonly key: DataKey }>();

  /**
   * Starts the page's key lookup; the returned function opens the page once the keys are in.
   * `share`: for live subscriptions only, the one path whose event objects other readers see too.
   */
  function prepare(page: ReadAllPage, share = false): Promise<() => ReadAllPage> {
    const subjects = subjectsOf(page.events);
    if (subjects.size === 0) return Promise.resolve(() => page);
    return keys.load(unique(subjects.values())).then((stored) => () => {
      const byStream = new Map<string, StoredKey | undefined>();
      for (const [streamId, subject] of subjects) byStream.set(streamId, stored.get(subjectRef(subject)));
      const keyOf: KeyOf = (streamId) => byStream.get(streamId);
      const open = (event: RecordedEvent) => {
        const key = keyOf(event.streamId);
        const shared = share ? sharedOpenings.get(event) : undefined;
        if (shared !== undefined && shared.key === key) return shared.event;
        const result = openEvent(event, keyOf);
        if (share && result !== event && typeof key === 'object') sharedOpenings.set(event, { event: result, key });
        return result;
      };
      return { ...page, events: page.events.map(open) };
    });
  }

  const openPage = async (page: ReadAllPage) => (await prepare(page))();

  /** `prepare` for a bulk read, its values opened by `opener`'s thread while the caller folds. */
  function prepareOffThread(opener: BulkOpener, loadSealed: NonNullable<DataKeyStore['loadSealed']>) {
    return async (page: ReadAllPage): Promise<() => ReadAllPage> => {
      const subjects = subjectsOf(page.events);
      if (subjects.size === 0) return () => page;
      const stored = await loadSealed(unique(subjects.values()));
      const storedOf = new Map<string, SealedDataKey | 'destroyed' | undefined>();
      for (const [streamId, subject] of subjects) storedOf.set(streamId, stored.get(subjectRef(subject)));
      const job = { keys: [] as SealedDataKey[], keyOf: [] as number[], values: [] as string[], places: [] as string[] };
      const keyIndex = new Map<SealedDataKey, number>();
      // Per event sent: where its values start in the job, and which fields they are. The other
      // events open (or fail) in-thread as usual.
      type Sent = { readonly at: number; readonly fields: string[] };
      const sent = new Map<number, Sent>();
      page.events.forEach((event, i) => {
        const fields = personal(event.type);
        const subject = subjects.get(event.streamId);
        if (!fields || !subject || !isRecord(event.data)) return;
        const key = storedOf.get(event.streamId);
        if (key === undefined || key === 'destroyed') return;
        const data = event.data;
        let mine: Sent | undefined;
        let k = 0;
        for (const field of fields) {
          const value = data[field];
          if (!isSealed(value)) continue;
          if (!mine) {
            sent.set(i, (mine = { at: job.values.length, fields: [] }));
            const known = keyIndex.get(key);
            if (known === undefined) keyIndex.set(key, (k = job.keys.push(key) - 1));
            else k = known;
          }
          mine.fields.push(field);
          job.keyOf.push(k);
          job.values.push(value);
          job.places.push(fieldPlace(subject.tenantId, event.streamId, event.type, field));
        }
      });
      const plainValues = job.values.length > 0 ? await opener.open(job) : [];
      const destroyedOrNone: KeyOf = (streamId) => (storedOf.get(streamId) === 'destroyed' ? 'destroyed' : undefined);
      return () => ({
        ...page,
        events: page.events.map((event, i) => {
          const mine = sent.get(i);
          if (mine === undefined) return openEvent(event, destroyedOrNone);
          const plain: Record<string, unknown> = { ...(event.data as Record<string, unknown>) };
          let at = mine.at;
          for (const field of mine.fields) plain[field] = plainValues[at++];
          return withData(event, plain, false);
        }),
      });
    };
  }

  function readAllBulk(bulk: NonNullable<EventStore['readAllBulk']>, options: Parameters<NonNullable<EventStore['readAllBulk']>>[0]) {
    const pages = bulk(options);
    const loadSealed = keys.loadSealed?.bind(keys);
    if (!bulkOpener || !loadSealed) return openAhead(pages, prepare);
    const start = bulkOpener;
    // The thread starts with the first page asked for and ends with the read.
    return (async function* () {
      const opener = start();
      try {
        yield* openAhead(pages, prepareOffThread(opener, loadSealed), BULK_PAGES_AHEAD);
      } finally {
        await opener.close();
      }
    })();
  }

  async function readStream(streamId: string, options?: Parameters<EventStore['readStream']>[1]): Promise<RecordedEvent[]> {
    const subject = policy.subjectOf(streamId);
    if (!subject) return inner.readStream(streamId, options);
    const [events, stored] = await Promise.all([inner.readStream(streamId, options), keys.load([subject])]);
    let key = stored.get(subjectRef(subject));
    // Read side by side, the stream may predate a destruction the key lookup saw: read it again,
    // so that it holds what committed with the destruction (the erasure) before it opens as erased.
    const settled = key === 'destroyed' ? await inner.readStream(streamId, options) : events;
    // Or the lookup ran just before the subject's first key committed and the read just after
    // the events sealed with it: look the key up once more rather than fail on it.
    if (key === undefined && settled.some((e) => holdsSealed(e))) key = (await keys.load([subject])).get(subjectRef(subject));
    return settled.map((e) => openEvent(e, () => key));
  }

  /**
   * Runs an append; when it fails, the streams' subjects' cached keys are dropped. A new key is
   * committed without waiting for the WAL flush, and only a later commit flushes it: an append
   * that committed nothing (a lost connection, or a refused command such as a stale revision)
   * leaves it unflushed, so a crash could lose it while this process still sealed with it.
   */
  async function appending<T>(streamIds: readonly string[], append: () => Promise<T>): Promise<T> {
    try {
      return await append();
    } catch (error) {
      keys.forget?.(streamIds.flatMap((id) => policy.subjectOf(id) ?? []));
      throw error;
    }
  }

  return {
    append: async (streamId, events, options) => {
      const sealed = await sealEvents(streamId, events);
      return appending([streamId], () => inner.append(streamId, sealed, options));
    },

    appendMany: async (requests) => {
      const sealed = await Promise.all(
        requests.map(async (r): Promise<AppendRequest> => ({ ...r, events: await sealEvents(r.streamId, r.events) })),
      );
      return appending(
        requests.map((r) => r.streamId),
        () => inner.appendMany(sealed),
      );
    },

    readStream,

    readAll: async (options) => openPage(await inner.readAll(options)),

    async *subscribeToAll(options) {
      for await (const page of inner.subscribeToAll(options)) yield (await prepare(page, true))();
    },

    ...(inner.readAllBulk && {
      readAllBulk: (options) => readAllBulk((inner.readAllBulk as NonNullable<EventStore['readAllBulk']>).bind(inner), options),
    }),

    headPosition: () => inner.headPosition(),
    ping: () => inner.ping(),
    close: () => inner.close(),
  };
}

// Deciders hand the boundary plain values only, so every string is sealed: one that merely looks
// sealed (`enc:…`, from a user) left as it is would be stored in the clear and break every read.
function sealData(key: DataKey, data: unknown, fields: readonly string[], placeOf: (field: string) => string): unknown {
  if (!isRecord(data)) return data;
  const sealed: Record<string, unknown> = { ...data };
  for (const field of fields) {
    const value = data[field];
    if (value === undefined || value === null) continue;
    if (typeof value !== 'string') throw new TypeError(`personal field ${field} must be a string to be sealed`);
    sealed[field] = sealValue(key, value, placeOf(field));
  }
  return sealed;
}

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

function unique(subjects: Iterable<DataSubject>): DataSubject[] {
  const seen = new Map<string, DataSubject>();
  for (const s of subjects) seen.set(subjectRef(s), s);
  return [...seen.values()];
}

/** The event with other data; the rest as it was (a lazily parsed `metadata` stays lazy). */
function withData(event: RecordedEvent, data: unknown, redacted: boolean): RecordedEvent {
  return {
    id: event.id,
    streamId: event.streamId,
    revision: event.revision,
    type: event.type,
    data,
    get metadata() {
      return event.metadata;
    },
    position: event.position,
    recordedAt: event.recordedAt,
    ...(redacted && { redacted: true as const }),
  };
}

/**
 * Pages opened ahead: the next `depth` pages are requested, and their keys looked up, before the
 * caller gets the current one, so key lookups overlap the caller's fold instead of adding to it.
 */
// Off-thread, a page's job can only be handed to the thread in a turn of the event loop, which a
// caller folding a page does not give back until it is done: with several pages under way, the
// thread has the next one queued already whenever a fold begins.
const BULK_PAGES_AHEAD = 3;

async function* openAhead(pages: AsyncIterable<ReadAllPage>, prepare: (page: ReadAllPage) => Promise<() => ReadAllPage>, depth = 1) {
  const iterator = pages[Symbol.asyncIterator]();
  let ended = false;
  const fetchNext = () => {
    const next = iterator.next().then(async (r) => {
      if (r.done) {
        ended = true;
        return null;
      }
      return prepare(r.value);
    });
    next.catch(() => undefined); // awaited on a later turn; only keeps an abandoned read quiet
    return next;
  };
  let done = false;
  try {
    const ahead = [fetchNext()];
    const fill = () => {
      while (!ended && ahead.length < depth) ahead.push(fetchNext());
    };
    for (;;) {
      const open = await ahead.shift();
      if (!open) {
        done = true;
        return;
      }
      fill();
      yield open();
    }
  } finally {
    if (!done) await iterator.return?.();
  }
}
