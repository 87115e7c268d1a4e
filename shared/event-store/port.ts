/**
 * The event-store port: the only way the write side and the projectors touch events.
 * Small on purpose (append, read a stream, read / subscribe to all in global order) so that
 * every adapter (PostgreSQL, EventStoreDB/KurrentDB) can pass one contract suite.
 */

import { ConflictError } from '../errors.ts';

/** Where an event stands in the global log. Compared lexicographically (commit, then prepare). */
export type GlobalPosition = { readonly commit: bigint; readonly prepare: bigint };

/** Before the first event of every store (exclusive lower bound). */
export const START: GlobalPosition = Object.freeze({ commit: 0n, prepare: 0n });

/** `'no_stream'`: the stream must not exist. `'stream_exists'`: it must. A number: its exact revision. */
export type ExpectedRevision = 'any' | 'no_stream' | 'stream_exists' | number;

export type EventMetadata = {
  readonly tenantId?: string;
  readonly actor?: string;
  readonly occurredAt?: string;
  readonly correlationId?: string;
  readonly causationId?: string;
  readonly [key: string]: unknown;
};

export type NewEvent<Type extends string = string, Data = unknown> = {
  /** A UUID. Appending an event whose id the stream already holds is a no-op (idempotent retry). */
  readonly id: string;
  readonly type: Type;
  readonly data: Data;
  readonly metadata?: EventMetadata;
};

export type RecordedEvent<Type extends string = string, Data = unknown> = {
  readonly id: string;
  readonly streamId: string;
  /** 0-based position of the event inside its stream. */
  readonly revision: number;
  readonly type: Type;
  readonly data: Data;
  readonly metadata: EventMetadata;
  readonly position: GlobalPosition;
  /** ISO 8601 UTC instant at which the store recorded the event. */
  readonly recordedAt: string;
  /**
   * Set by the sealing boundary (sealing.ts) when the event's personal fields cannot be opened
   * because their data subject was erased (the key is destroyed): those fields read `null`.
   */
  readonly redacted?: true;
};

export type AppendResult = {
  /** Revision of the last event now in the stream (the new ETag). */
  readonly nextRevision: number;
  /** Global position of the last appended event (for read-your-writes). */
  readonly position: GlobalPosition;
};

/** One stream's part of an atomic multi-stream append. */
export type AppendRequest = {
  readonly streamId: string;
  readonly events: readonly NewEvent[];
  /** Default `'any'`. */
  readonly expectedRevision?: ExpectedRevision;
};

/** A stream as a reader saw it: its last revision then, -1 when it had no events. */
export type StreamSeen = { readonly streamId: string; readonly revision: number };

export type ReadStreamOptions = { readonly fromRevision?: number; readonly maxCount?: number };

export type ReadAllOptions = {
  /** Exclusive: events strictly after this position. Default: the beginning. */
  readonly after?: GlobalPosition;
  readonly maxCount?: number;
  /** Only events of these types (the position still advances past the others). */
  readonly eventTypes?: readonly string[];
};

export type ReadAllPage = {
  readonly events: RecordedEvent[];
  /**
   * How far the log was scanned: at or after the last returned event. With an `eventTypes`
   * filter it moves past events of other types, so a reader resumes here without rescanning.
   */
  readonly checkpoint: GlobalPosition;
  /**
   * Set by adapters that know it: true when the read reached what was readable when it ran (the
   * checkpoint is the head as that read saw it), so a live reader needs to read again only once
   * something new commits. Absent means unknown.
   */
  readonly atHead?: boolean;
};

export type SubscribeOptions = ReadAllOptions & {
  readonly signal?: AbortSignal;
  /** Longest wait between polls when the adapter has no push notification. */
  readonly pollIntervalMs?: number;
};

export type BulkReadOptions = {
  readonly after?: GlobalPosition;
  readonly eventTypes?: readonly string[];
  /** Events per page (the adapter's default when absent). */
  readonly pageSize?: number;
  readonly signal?: AbortSignal;
};

export interface EventStore {
  append(streamId: string, events: readonly NewEvent[], options?: { expectedRevision?: ExpectedRevision }): Promise<AppendResult>;
  /**
   * Atomic multi-stream append: every stream's events are appended, or none are (the first
   * failing stream's error is thrown: `WrongExpectedRevisionError` names it). Each stream at
   * most once per call, each with at least one event. Every event gets its own global
   * position; results come back in request order. Idempotent like `append`: a retry with the
   * same event ids is answered from the earlier append.
   */
  appendMany(requests: readonly AppendRequest[]): Promise<AppendResult[]>;
  /** The stream's events in order; an empty array when the stream does not exist. */
  readStream(streamId: string, options?: ReadStreamOptions): Promise<RecordedEvent[]>;
  /**
   * Committed events in global order after `options.after`. Never returns an event while one
   * that precedes it in that order could still commit (no gaps filled in later).
   */
  readAll(options?: ReadAllOptions): Promise<ReadAllPage>;
  /**
   * Catch-up subscription: yields pages from `after`, then turns live and keeps yielding as
   * events commit. Every event is yielded exactly once, in global order; a page may hold no
   * events and only move the checkpoint. Ends when `signal` aborts.
   */
  subscribeToAll(options?: SubscribeOptions): AsyncIterable<ReadAllPage>;
  /**
   * Optional, for rebuilds: the committed events (of `eventTypes`) after `after`, up to the head
   * of the log as it was when the read started, in global order and in large pages, as cheaply
   * as the adapter can. The last page's checkpoint is that head; later events are read with
   * `readAll`. Adapters without a cheaper path than `readAll` leave it out.
   */
  readAllBulk?(options?: BulkReadOptions): AsyncIterable<ReadAllPage>;
  /** Position of the newest committed event, or START when the log is empty. */
  headPosition(): Promise<GlobalPosition>;
  ping(): Promise<void>;
  close(): Promise<void>;
}

export function comparePositions(a: GlobalPosition, b: GlobalPosition): number {
  if (a.commit !== b.commit) return a.commit < b.commit ? -1 : 1;
  if (a.prepare !== b.prepare) return a.prepare < b.prepare ? -1 : 1;
  return 0;
}

/** Opaque text form for HTTP headers and the ops CLI: `<commit>-<prepare>`. */
export function formatPosition(p: GlobalPosition): string {
  return `${p.commit}-${p.prepare}`;
}

export function parsePosition(text: string): GlobalPosition | undefined {
  const match = /^(\d{1,20})-(\d{1,20})$/.exec(text.trim());
  if (!match?.[1] || !match[2]) return undefined;
  return { commit: BigInt(match[1]), prepare: BigInt(match[2]) };
}

export function matchesExpected(expected: ExpectedRevision, actual: number | 'no_stream'): boolean {
  switch (expected) {
    case 'any':
      return true;
    case 'no_stream':
      return actual === 'no_stream';
    case 'stream_exists':
      return actual !== 'no_stream';
    default:
      return actual === expected;
  }
}

/**
 * An event id names one event, so a call that carries the same id twice is refused before it is
 * sent, as an id already used by another event is (`ConflictError`), whichever the adapter:
 * PostgreSQL's unique index would otherwise fail the whole flush with a bare SQL error.
 */
function assertDistinctEventIds(events: Iterable<NewEvent>, ids = new Set<string>()): void {
  for (const e of events) {
    if (ids.has(e.id)) throw new ConflictError(`Event id ${e.id} appears more than once in this append`);
    ids.add(e.id);
  }
}

/** The checks every adapter applies to an `append` call before sending it. */
export function assertAppendEvents(events: readonly NewEvent[]): void {
  if (events.length === 0) throw new Error('append needs at least one event');
  assertDistinctEventIds(events);
}

/** The checks every adapter applies to an `appendMany` call before sending it. */
export function assertAppendManyRequests(requests: readonly AppendRequest[]): void {
  if (requests.length === 0) throw new Error('appendMany needs at least one stream');
  const seen = new Set<string>();
  const ids = new Set<string>();
  for (const request of requests) {
    if (request.events.length === 0) throw new Error(`appendMany: no events for stream ${request.streamId}`);
    if (seen.has(request.streamId)) throw new Error(`appendMany: stream ${request.streamId} appears twice (at most once per call)`);
    seen.add(request.streamId);
    assertDistinctEventIds(request.events, ids);
  }
}
