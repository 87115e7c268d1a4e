import {
  BACKWARDS,
  END,
  FORWARDS,
  KurrentDBClient,
  StreamNotFoundError,
  WrongExpectedVersionError,
  eventTypeFilter,
  excludeSystemEvents,
  type Filter,
} from '@kurrent/kurrentdb-client';
import { ConflictError } from '../../errors.ts';
import {
  START,
  assertAppendEvents,
  assertAppendManyRequests,
  comparePositions,
  type AppendResult,
  type EventStore,
  type GlobalPosition,
  type NewEvent,
  type ReadAllOptions,
  type ReadAllPage,
  type RecordedEvent,
  type SubscribeOptions,
} from '../port.ts';
import { openFeed } from './feed.ts';
import {
  eventTypesRegex,
  maxPosition,
  toEventData,
  toMultiAppendEventData,
  toReadPosition,
  toRecorded,
  toStreamState,
  toWrongExpectedRevision,
} from './mapping.ts';

/**
 * EventStoreDB / KurrentDB adapter of the event-store port (gRPC, `@kurrent/kurrentdb-client`).
 *
 * - `GlobalPosition {commit, prepare}` is ESDB's `$all` position, 1:1.
 * - Reads of `$all` are inclusive of `fromPosition`; the port's `after` is exclusive, so the
 *   event at exactly `after` is dropped. System events (`$...`) never leave the adapter.
 * - The log of a single KurrentDB leader only ever grows at its end, so a forward read of
 *   `$all` never sees an event appear before one it already returned: the head read *before*
 *   a read that came back short is a safe checkpoint (everything up to it was scanned).
 * - Catch-up subscriptions restart from the last yielded checkpoint whenever the server stream
 *   ends, errors or the connection drops (gRPC keepalive detects dead links); events at or
 *   before that checkpoint are dropped, so a restart never repeats one.
 */
export type EventStoreDbOptions = {
  /** Longest wait before a dropped subscription is opened again (doubling from 100 ms). */
  readonly maxResubscribeDelayMs?: number;
};

/**
 * Connects with the keepalive the subscriptions rely on to notice a dead link: a connection
 * string may set its own `keepAliveInterval` / `keepAliveTimeout`.
 */
export function connectEventStoreDb(url: string): KurrentDBClient {
  const parsed = new URL(url);
  if (!parsed.searchParams.has('keepAliveInterval')) parsed.searchParams.set('keepAliveInterval', '10000');
  if (!parsed.searchParams.has('keepAliveTimeout')) parsed.searchParams.set('keepAliveTimeout', '10000');
  return KurrentDBClient.connectionString(parsed.toString());
}

export function createEventStoreDbEventStore(client: KurrentDBClient, options: EventStoreDbOptions = {}): EventStore {
  const maxResubscribeDelayMs = options.maxResubscribeDelayMs ?? 5_000;

  async function readStream(streamId: string, { fromRevision = 0, maxCount = 1_000_000 } = {}): Promise<RecordedEvent[]> {
    const events: RecordedEvent[] = [];
    try {
      for await (const resolved of client.readStream(streamId, {
        fromRevision: BigInt(fromRevision),
        maxCount: BigInt(maxCount),
        direction: FORWARDS,
      })) {
        const recorded = resolved.event && toRecorded(resolved.event);
        if (recorded) events.push(recorded);
      }
    } catch (error) {
      if (error instanceof StreamNotFoundError) return [];
      throw error;
    }
    return events;
  }

  /** The events of a completed append, if these exact ids are already the stream's last ones. */
  async function findEarlierAppend(streamId: string, events: readonly NewEvent[]): Promise<AppendResult | null> {
    const ids = new Set(events.map((e) => e.id));
    const stream = await readStream(streamId);
    const matching = stream.filter((e) => ids.has(e.id));
    if (matching.length === 0) return null;
    const last = matching.at(-1);
    if (matching.length !== events.length || !last) throw new ConflictError('Some of these event ids were already used by other events');
    return { nextRevision: last.revision, position: last.position };
  }

  async function headPosition(): Promise<GlobalPosition> {
    for await (const resolved of client.readAll({ direction: BACKWARDS, fromPosition: END, maxCount: 1, filter: excludeSystemEvents() })) {
      const position = resolved.event?.position;
      if (position) return { commit: position.commit, prepare: position.prepare };
    }
    return START;
  }

  async function readAll(opts: ReadAllOptions = {}): Promise<ReadAllPage> {
    const after = opts.after ?? START;
    const maxCount = opts.maxCount ?? 1_000;
    const filter: Filter = opts.eventTypes ? eventTypeFilter({ regex: eventTypesRegex(opts.eventTypes) }) : excludeSystemEvents();
    // Taken before the read: every event up to it is readable now, so a short read saw them all.
    const head = await headPosition();
    const events: RecordedEvent[] = [];
    // One more than asked: the event at exactly `after` comes back first (inclusive read).
    for await (const resolved of client.readAll({
      fromPosition: toReadPosition(after),
      maxCount: maxCount + 1,
      filter,
      direction: FORWARDS,
    })) {
      const recorded = resolved.event && toRecorded(resolved.event);
      if (!recorded || comparePositions(recorded.position, after) <= 0) continue;
      events.push(recorded);
      if (events.length === maxCount) break;
    }
    const last = events.at(-1)?.position ?? after;
    const checkpoint = events.length === maxCount ? last : maxPosition(maxPosition(last, head), after);
    return { events, checkpoint };
  }

  return {
    async append(streamId, events, { expectedRevision = 'any' } = {}) {
      assertAppendEvents(events);
      try {
        const result = await client.appendToStream(streamId, events.map(toEventData), { streamState: toStreamState(expectedRevision) });
        const nextRevision = Number(result.nextExpectedRevision);
        if (result.position && result.position.commit >= 0n) {
          return { nextRevision, position: { commit: result.position.commit, prepare: result.position.prepare } };
        }
        // An idempotent replay of an earlier append may come back without a log position.
        const [lastEvent] = await readStream(streamId, { fromRevision: nextRevision, maxCount: 1 });
        if (!lastEvent) throw new Error(`appended to ${streamId} but cannot read revision ${nextRevision} back`);
        return { nextRevision, position: lastEvent.position };
      } catch (error) {
        if (!(error instanceof WrongExpectedVersionError)) throw error;
        // ESDB replays a retry at the same expected revision itself; a retry made with another
        // expectation (e.g. after the first answer was lost) is recognised by its event ids.
        const earlier = await findEarlierAppend(streamId, events);
        if (earlier) return earlier;
        throw toWrongExpectedRevision(error, streamId, expectedRevision);
      }
    },

    /**
     * KurrentDB's atomic multi-stream append (server ≥ 25.1, client ≥ 1.1.0): all streams or
     * none. The server answers one log position for the whole write, so each stream's last
     * event is read back for its exact `$all` position. Its event properties must be strings:
     * metadata values that are not are refused here rather than mangled.
     */
    async appendMany(requests) {
      assertAppendManyRequests(requests);
      try {
        const result = await client.multiStreamAppend(
          requests.map((r) => ({
            streamName: r.streamId,
            events: r.events.map(toMultiAppendEventData),
            expectedState: toStreamState(r.expectedRevision ?? 'any'),
          })),
        );
        const revisions = new Map(result.responses.map((r) => [r.streamName, Number(r.revision)]));
        return await Promise.all(
          requests.map(async (r) => {
            const nextRevision = revisions.get(r.streamId);
            if (nextRevision === undefined) throw new Error(`multiStreamAppend answered nothing for ${r.streamId}`);
            const [lastEvent] = await readStream(r.streamId, { fromRevision: nextRevision, maxCount: 1 });
            if (!lastEvent) throw new Error(`appended to ${r.streamId} but cannot read revision ${nextRevision} back`);
            return { nextRevision, position: lastEvent.position };
          }),
        );
      } catch (error) {
        if (!(error instanceof WrongExpectedVersionError)) throw error;
        // A retry of an append that went through: every stream already ends with these ids.
        const earlier = await Promise.all(requests.map((r) => findEarlierAppend(r.streamId, r.events)));
        if (earlier.every((e) => e !== null)) return earlier.filter((e) => e !== null);
        const failed = requests.find((r) => r.streamId === error.streamName) ?? requests[0];
        throw toWrongExpectedRevision(error, failed?.streamId ?? error.streamName, failed?.expectedRevision ?? 'any');
      }
    },

    readStream,
    readAll,

    async *subscribeToAll(opts: SubscribeOptions = {}) {
      const { signal } = opts;
      const maxCount = opts.maxCount ?? 500;
      let after = opts.after ?? START;
      let failures = 0;
      while (!signal?.aborted) {
        const feed = openFeed(client, after, opts.eventTypes);
        try {
          for (;;) {
            const batch = await feed.take(maxCount, signal);
            if (batch === 'aborted') return;
            if (batch === 'ended') break;
            failures = 0;
            const events = batch.events.filter((e) => comparePositions(e.position, after) > 0);
            const checkpoint = maxPosition(events.at(-1)?.position ?? after, batch.checkpoint ?? after);
            if (events.length === 0 && comparePositions(checkpoint, after) <= 0) continue;
            after = checkpoint;
            yield { events, checkpoint };
          }
        } finally {
          feed.close();
        }
        // Dropped or ended without being asked to: open again from the last yielded checkpoint.
        failures++;
        await sleep(Math.min(100 * 2 ** Math.min(failures, 10), maxResubscribeDelayMs), signal);
      }
    },

    headPosition,

    async ping() {
      await headPosition();
    },

    async close() {
      await client.dispose();
    },
  };
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}
