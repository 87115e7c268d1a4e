import { randomUUID } from 'node:crypto';
import { ErasedError, PreconditionFailedError, WrongExpectedRevisionError } from '../shared/errors.ts';
import type {
  AppendRequest,
  AppendResult,
  EventMetadata,
  EventStore,
  ExpectedRevision,
  GlobalPosition,
  NewEvent,
} from '../shared/event-store/port.ts';

/** A pure decider (emmett style): fold events into state, decide events from a command. */
export type Decider<State, Command, Event extends { readonly type: string; readonly data: unknown }> = {
  readonly initialState: State;
  evolve(state: State, event: Event): State;
  decide(command: Command, state: State): Event[];
};

/** The revisions an `If-Match` accepts (undefined: no condition, as for `*`). */
export type IfMatch = readonly number[];

/**
 * The precondition: 412 unless `revision` is one `ifMatch` accepts (none given: anything is).
 * Checked before work that processes the request's content (an email reservation, a role
 * lookup), so a stale `If-Match` is answered 412 whatever the content (RFC 9110 §13.2.2); the
 * command's append still guards against a change in between.
 */
export function preconditionHolds(ifMatch: IfMatch | undefined, revision: number): void {
  if (ifMatch === undefined || ifMatch.includes(revision)) return;
  const named = ifMatch.length > 0 ? ifMatch.join(' or ') : 'any revision the If-Match names';
  throw new PreconditionFailedError(`The resource is at revision ${revision}, not ${named}`, { currentRevision: revision });
}

export type HandleCommandOptions<State = unknown, Event = unknown> = {
  /**
   * The revisions the client accepts (`If-Match`, one per strong tag; empty when no tag can
   * match). When given, a stream at any other revision fails with 412, also after a lost race:
   * the client decided on data that is now stale. A race that leaves the stream at a revision
   * the list names is decided again, as without `If-Match`.
   */
  readonly ifMatch?: IfMatch;
  /** Stored with every event: tenant, actor, occurredAt (the audit trail). */
  readonly metadata: EventMetadata;
  /**
   * Checked on the state before the If-Match precondition: a resource that is gone for good says
   * so (410) rather than answering 412 to a client whose tag is stale because of its removal.
   */
  readonly assertPresent?: (state: State) => void;
  /** Attempts after a lost race when no `ifMatch` was given. */
  readonly maxRetries?: number;
  /**
   * The command creates its stream (e.g. a fresh ULID): decide on the initial state without
   * reading, append expecting `no_stream`. If the stream exists after all, the command falls
   * back to the usual read-decide-append.
   */
  readonly newStream?: boolean;
  /**
   * Appends to other streams that must commit atomically with this command's events (one
   * `appendMany`). Given as a list, a revision conflict on one of them is thrown to the caller.
   * Given as a function, they are planned from what was decided (the events, on the state they
   * were decided on) after every decision, and a conflict on one of them decides again, as one on
   * the command's own stream does. It runs only when the command appends something.
   */
  readonly alongside?: readonly AppendRequest[] | ((events: readonly Event[], state: State) => Promise<readonly AppendRequest[]>);
};

export type CommandResult<State, Event> = {
  readonly state: State;
  /** The events this command appended (empty when it changed nothing). */
  readonly events: readonly Event[];
  /** Stream revision after the command (-1: the stream still does not exist). The new ETag. */
  readonly revision: number;
  /** Global position of the stream's newest event, for read-your-writes; null for an empty stream. */
  readonly position: GlobalPosition | null;
};

/**
 * The one command handler: read the stream, fold it, decide, append with the revision that was
 * read as the expected one. A concurrent writer makes the append fail; the command is decided
 * again on the fresh state, unless the client's `If-Match` no longer holds (412).
 */
export async function handleCommand<State, Command, Event extends { readonly type: string; readonly data: unknown }>(
  store: EventStore,
  decider: Decider<State, Command, Event>,
  streamId: string,
  command: Command,
  options: HandleCommandOptions<State, Event>,
): Promise<CommandResult<State, Event>> {
  const maxRetries = options.maxRetries ?? 5;
  // A command that creates its stream has nothing to read; one on an existing stream reads it once per attempt.
  let read = options.newStream !== true || options.ifMatch !== undefined;
  let erasedMeanwhile = false;
  for (let attempt = 0; ; attempt++) {
    const recorded = read ? await store.readStream(streamId) : [];
    const revision = recorded.length - 1;
    // The store hands back what the decider's own events serialised to; this is that boundary.
    const history = recorded.map((e) => ({ type: e.type, data: e.data }) as Event);
    const state = history.reduce(decider.evolve, decider.initialState);
    options.assertPresent?.(state);
    preconditionHolds(options.ifMatch, revision);
    const events = decider.decide(command, state);
    const last = recorded.at(-1);
    if (events.length === 0) return { state, events, revision, position: last?.position ?? null };

    const expectedRevision: ExpectedRevision = revision < 0 ? 'no_stream' : revision;
    const newEvents: NewEvent[] = events.map((e) => ({ id: randomUUID(), type: e.type, data: e.data, metadata: options.metadata }));
    const planned = typeof options.alongside === 'function';
    const alongside = typeof options.alongside === 'function' ? await options.alongside(events, state) : options.alongside;
    try {
      const appended = await appendWith(store, { streamId, events: newEvents, expectedRevision }, alongside);
      return { state: events.reduce(decider.evolve, state), events, revision: appended.nextRevision, position: appended.position };
    } catch (error) {
      // An erasure that committed after the decision refuses to seal its personal data: decided
      // again on the stream that now ends with it, the command is answered as on any erased
      // resource (with when it was erased). Once: a store that keeps refusing answers itself.
      if (error instanceof ErasedError && !erasedMeanwhile) {
        erasedMeanwhile = true;
        read = true;
        continue;
      }
      if (!(error instanceof WrongExpectedRevisionError)) throw error;
      if (error.streamId !== streamId) {
        // Another stream of the append moved: planned from this decision, it is planned again.
        if (!planned || !alongside?.some((r) => r.streamId === error.streamId) || attempt >= maxRetries) throw error;
        read = true;
        continue;
      }
      read = true;
      // Decided again while the client's If-Match (none, or a list that names where the stream
      // is now) still holds; otherwise the client decided on data that is now stale.
      if (options.ifMatch !== undefined && !(typeof error.actual === 'number' && options.ifMatch.includes(error.actual))) {
        throw new PreconditionFailedError('The resource changed while this request was handled', { currentRevision: error.actual });
      }
      if (attempt >= maxRetries) throw error;
    }
  }
}

async function appendWith(store: EventStore, own: AppendRequest, alongside: readonly AppendRequest[] | undefined): Promise<AppendResult> {
  if (!alongside || alongside.length === 0) return store.append(own.streamId, own.events, { expectedRevision: own.expectedRevision });
  const results = await store.appendMany([...alongside, own]);
  const result = results.at(-1);
  if (!result) throw new Error('appendMany returned no result for the command stream');
  return result;
}
