import { z } from 'zod';
import { ignoredRows, sql, type Queryable } from '../db/pool.ts';
import type { RecordedEvent } from '../event-store/port.ts';
import { withFieldsNull } from '../personal-data/policy.ts';
import { RetryLaterError } from './failures.ts';

/**
 * Keeping an erased person's fields out of parked events (parking.ts). A projection parks an event
 * as it was handed it, opened, possibly on a page read before the person's key was destroyed. So
 * the erasure blanks the copies already parked and records the person's stream, and a park looks
 * the stream up: the erased fields of a later copy are stored null.
 */

/**
 * Orders a park of a stream's event (shared) and an erasure of the stream's person (exclusive):
 * the second of the two sees what the first committed.
 */
// The two-key form: its keys are apart from every single-key lock (the log's stream locks, a
// rebuild's, the webhooks'), so a hash that happens to match one of those blocks nothing.
const PARKING_LOCKS = 0x70_61_72_6b; // 'park'
const parkingLock = (streamId: string) => sql.fragment`${PARKING_LOCKS}::int4, hashtext(${streamId})`;

const freeRow = z.object({ free: z.boolean() });
const redactedFieldsRow = z.object({ fields: z.array(z.string()) });

/**
 * What a parked copy holds: its data, and whether it is an erased person's (blanked for their
 * erasure, or handed over already redacted). A retry hands a `redacted` copy back with `redacted: true` (parking.ts), the form the sealing
 * boundary gives an erased person's event, which every projection applies as erased; without it,
 * a projection would apply the blanks as the person's values.
 */
export type ParkedCopy = { readonly data: unknown; readonly redacted: boolean };

/**
 * The copy to park `event` as, in the parking transaction: as it is, or with the fields an
 * erasure of its stream's person named set to null. While such an erasure is in flight, throws
 * RetryLaterError: the page is tried again, read afresh (a page never waits for an erasure, so
 * the two never wait on each other).
 */
export async function copyToPark(tx: Queryable, event: RecordedEvent): Promise<ParkedCopy> {
  const free = await tx.oneFirst(sql.type(freeRow)`
    select pg_try_advisory_xact_lock_shared(${parkingLock(event.streamId)}) as free
  `);
  if (!free) throw new RetryLaterError(`an erasure of the person of ${event.streamId} is in flight: the page is read again after it`);
  // A statement of its own: under read committed it sees every erasure that committed before it began.
  const fields = await tx.maybeOneFirst(sql.type(redactedFieldsRow)`
    select fields from projection_parked_redactions where stream_id = ${event.streamId}
  `);
  // An event opened after its key was destroyed comes blanked and marked already; it stays marked
  // where its stream is not recorded (an erasure from before the record existed).
  if (!fields) return { data: event.data, redacted: event.redacted === true };
  return { data: withFieldsNull(event.data, fields), redacted: true };
}

/**
 * Blanks `fields` (set to null where present) in the data of every event of `streamIds` parked by
 * any projection, and marks the copies redacted: a parked event is stored as the projection was
 * handed it, opened, so an erasure of the stream's person must reach it too. A retry hands such a
 * copy back redacted, so a projection applies it as it applies an erased person's event read from
 * the log, and as a rebuild after the erasure would.
 */
export async function redactParkedEvents(tx: Queryable, streamIds: readonly string[], fields: readonly string[]): Promise<void> {
  if (streamIds.length === 0) return;
  await tx.query(sql.type(ignoredRows)`
    update projection_parked_events set
      data = data || coalesce((
        select jsonb_object_agg(k, null) from jsonb_object_keys(data) k where k = any(${sql.array([...fields], 'text')})
      ), '{}'::jsonb),
      redacted = true
    where stream_id = any(${sql.array([...streamIds], 'text')}) and jsonb_typeof(data) = 'object'
  `);
}

/**
 * For an erasure, first in its transaction: takes the parking lock of `streamIds` exclusively,
 * waiting for the pages that have parked an event of theirs to commit (a page never waits for
 * it). Taken before anything else, the erasure holds no row a page could be waiting for.
 */
export async function holdParkedStreams(tx: Queryable, streamIds: readonly string[]): Promise<void> {
  // One at a time, in one order: two erasures of overlapping streams never wait on each other in a cycle.
  for (const streamId of [...new Set(streamIds)].sort()) {
    await tx.query(sql.type(ignoredRows)`select pg_advisory_xact_lock(${parkingLock(streamId)})::text`);
  }
}

/**
 * For an erasure, in its transaction: blanks `fields` in the parked events of `streamIds`
 * (redactParkedEvents) and records the streams, so that an event of theirs a projection parks
 * later, opened on a page it read before the erasure committed, is parked without them
 * (parkEvent). Holds the streams' parking lock (holdParkedStreams) before it, so the blanking
 * statement also finds the rows of the pages that were parking meanwhile.
 */
export async function redactParkedStreams(tx: Queryable, streamIds: readonly string[], fields: readonly string[]): Promise<void> {
  const streams = [...new Set(streamIds)].sort();
  if (streams.length === 0) return;
  await holdParkedStreams(tx, streams);
  await tx.query(sql.type(ignoredRows)`
    insert into projection_parked_redactions (stream_id, fields)
    select stream_id, ${sql.array([...fields], 'text')} from unnest(${sql.array(streams, 'text')}::text[]) as stream_id
    on conflict (stream_id) do update
      set fields = array(select distinct f from unnest(projection_parked_redactions.fields || excluded.fields) as f order by f)
  `);
  await redactParkedEvents(tx, streams, fields);
}
