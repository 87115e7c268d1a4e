import {
  ANY,
  NO_STREAM,
  START as ESDB_START,
  STREAM_EXISTS,
  type AppendStreamState,
  type EventData,
  type JSONType,
  type ReadPosition,
  type RecordedEvent as EsdbRecorded,
  type WrongExpectedVersionError,
} from '@kurrent/kurrentdb-client';
import { WrongExpectedRevisionError } from '../../errors.ts';
import {
  START,
  comparePositions,
  type EventMetadata,
  type ExpectedRevision,
  type GlobalPosition,
  type NewEvent,
  type RecordedEvent,
} from '../port.ts';

/** Translations between the port's types and the KurrentDB client's, in both directions. */
/** Our expected revision as the client's stream state: exact, never widened. */
export function toStreamState(expected: ExpectedRevision): AppendStreamState {
  switch (expected) {
    case 'any':
      return ANY;
    case 'no_stream':
      return NO_STREAM;
    case 'stream_exists':
      return STREAM_EXISTS;
    default:
      if (!Number.isSafeInteger(expected) || expected < 0) throw new RangeError(`invalid expected revision ${expected}`);
      return BigInt(expected);
  }
}

/** ESDB's WrongExpectedVersionError as ours (same HTTP meaning: 409 / 412 upstream). */
export function toWrongExpectedRevision(
  error: WrongExpectedVersionError,
  streamId: string,
  expected: ExpectedRevision,
): WrongExpectedRevisionError {
  const actual = error.actualState;
  // Deleted (-5) / tombstoned (-6) streams and an unknown state read as "no stream" to callers.
  const revision = typeof actual === 'bigint' && actual >= 0n ? Number(actual) : 'no_stream';
  return new WrongExpectedRevisionError(streamId, String(expected), revision);
}

const escapeRegex = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** Server-side filter regex matching exactly these event types. */
export function eventTypesRegex(types: readonly string[]): string {
  return `^(?:${types.map(escapeRegex).join('|')})$`;
}

/** Our position as the client's read position: START of the port is ESDB's start of `$all`. */
export function toReadPosition(position: GlobalPosition): ReadPosition {
  return comparePositions(position, START) === 0 ? ESDB_START : { commit: position.commit, prepare: position.prepare };
}

const isSystem = (type: string, streamId: string) => type.startsWith('$') || streamId.startsWith('$');

/** Stream reads carry the `$all` position too on servers ≥ 22.6 (the supported range). */
export function toRecorded(event: EsdbRecorded): RecordedEvent | undefined {
  if (!event.position || isSystem(event.type, event.streamId)) return undefined;
  const metadata = event.metadata;
  return {
    id: event.id,
    streamId: event.streamId,
    revision: Number(event.revision),
    type: event.type,
    data: event.isJson ? event.data : Buffer.from(event.data).toString('base64'),
    metadata:
      metadata && typeof metadata === 'object' && !(metadata instanceof Uint8Array) && !Array.isArray(metadata)
        ? (metadata as EventMetadata)
        : {},
    position: { commit: event.position.commit, prepare: event.position.prepare },
    recordedAt: event.created.toISOString(),
  };
}

export const toEventData = (event: NewEvent): EventData => ({
  id: event.id,
  contentType: 'application/json',
  type: event.type,
  data: event.data as JSONType,
  metadata: (event.metadata ?? {}) as JSONType,
});

/** multiStreamAppend carries metadata as string properties only. */
export const toMultiAppendEventData = (event: NewEvent): EventData => {
  const metadata: Record<string, string> = {};
  for (const [key, value] of Object.entries(event.metadata ?? {})) {
    if (value === undefined) continue;
    if (typeof value !== 'string') throw new TypeError(`appendMany on KurrentDB: metadata.${key} must be a string`);
    metadata[key] = value;
  }
  return { ...toEventData(event), metadata };
};

export const maxPosition = (a: GlobalPosition, b: GlobalPosition) => (comparePositions(a, b) >= 0 ? a : b);
