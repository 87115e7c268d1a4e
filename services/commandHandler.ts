import { randomUUID } from 'node:crypto';
import { PreconditionFailedError, WrongExpectedRevisionError } from '../shared/errors.ts';
import type { EventMetadata, EventStore, ExpectedRevision, GlobalPosition } from '../shared/event-store/port.ts';

/** A pure decider (emmett style): fold events into state, decide events from a command. */
export type Decider<State, Command, Event extends { readonly type: string; readonly data: unknown }> = {
  readonly initialState: State;
  evolve(state: State, event: Event): State;
  decide(command: Command, state: State): Event[];
};

export type HandleCommandOptions = {
  /**
   * The revision the client last saw (`If-Match`). When given, a stream at any other revision
   * fails with 412 and nothing is retried: the client decided on data that is now stale.
   */
  readonly ifMatch?: number;
  /** Stored with every event: tenant, actor, occurredAt (the audit trail). */
  readonly metadata: EventMetadata;
  /** Attempts after a lost race when no `ifMatch` was given. */
  readonly maxRetries?: number;
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
 * read as the expected one. A concurrent writer makes the append fail; without `If-Match` the
 * command is simply decided again on the fresh state, with `If-Match` the client gets 412.
 */
export async function handleCommand<State, Command, Event extends { readonly type: string; readonly data: unknown }>(
  store: EventStore,
  decider: Decider<State, Command, Event>,
  streamId: string,
  command: Command,
  options: HandleCommandOptions,
): Promise<CommandResult<State, Event>> {
  const maxRetries = options.maxRetries ?? 5;
  for (let attempt = 0; ; attempt++) {
    const recorded = await store.readStream(streamId);
    const revision = recorded.length - 1;
    if (options.ifMatch !== undefined && options.ifMatch !== revision) {
      throw new PreconditionFailedError(`The resource is at revision ${revision}, not ${options.ifMatch}`, { currentRevision: revision });
    }
    // The store hands back what the decider's own events serialised to; this is that boundary.
    const history = recorded.map((e) => ({ type: e.type, data: e.data }) as Event);
    const state = history.reduce(decider.evolve, decider.initialState);
    const events = decider.decide(command, state);
    const last = recorded.at(-1);
    if (events.length === 0) return { state, events, revision, position: last?.position ?? null };

    const expectedRevision: ExpectedRevision = revision < 0 ? 'no_stream' : revision;
    try {
      const appended = await store.append(
        streamId,
        events.map((e) => ({ id: randomUUID(), type: e.type, data: e.data, metadata: options.metadata })),
        { expectedRevision },
      );
      return { state: events.reduce(decider.evolve, state), events, revision: appended.nextRevision, position: appended.position };
    } catch (error) {
      if (!(error instanceof WrongExpectedRevisionError)) throw error;
      if (options.ifMatch !== undefined) {
        throw new PreconditionFailedError('The resource changed while this request was handled', { currentRevision: error.actual });
      }
      if (attempt >= maxRetries) throw error;
    }
  }
}
