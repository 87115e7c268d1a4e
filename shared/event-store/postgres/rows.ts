import { z } from 'zod';
import { sql } from '../../db/pool.ts';
import type { GlobalPosition, RecordedEvent } from '../port.ts';

/** Rows the adapter reads, validated at the read boundary, and their mapping to the port's types. */

export const positionRow = z.object({ commit: z.string(), prepare: z.number() });
export const eventRow = z.object({
  id: z.string(),
  stream_id: z.string(),
  revision: z.number(),
  type: z.string(),
  data: z.unknown(),
  metadata: z.record(z.string(), z.unknown()),
  commit: z.string(),
  prepare: z.number(),
  recorded_at: z.string(),
});

/** A row of `es_read_page`: an event, or (null id) the end of a filtered read's scanned window. */
export const pageRow = eventRow.extend({
  id: z.string().nullable(),
  stream_id: z.string().nullable(),
  revision: z.number().nullable(),
  type: z.string().nullable(),
  metadata: z.record(z.string(), z.unknown()).nullable(),
  recorded_at: z.string().nullable(),
});

/** An event row of `es_read_page` (every column set), or null for its window-end row. */
export function pageEvent(row: z.infer<typeof pageRow>): RecordedEvent | null {
  const { id, stream_id, revision, type, metadata, recorded_at } = row;
  if (id === null) return null;
  if (stream_id === null || revision === null || type === null || metadata === null || recorded_at === null) {
    throw new Error(`es_read_page returned an incomplete event row (${id})`);
  }
  return toRecorded({ ...row, id, stream_id, revision, type, metadata, recorded_at });
}

export const toPosition = (row: z.infer<typeof positionRow>): GlobalPosition => ({
  commit: BigInt(row.commit),
  prepare: BigInt(row.prepare),
});

export const toRecorded = (row: z.infer<typeof eventRow>): RecordedEvent => ({
  id: row.id,
  streamId: row.stream_id,
  revision: row.revision,
  type: row.type,
  data: row.data,
  metadata: row.metadata,
  position: toPosition(row),
  recordedAt: row.recorded_at,
});

export const eventColumns = sql.fragment`
  event_id::text as id, stream_id, revision, type, data, metadata,
  transaction_id::text as commit, position as prepare, recorded_at
`;

/** The read horizon (`es_read_horizon`, see its migration), for the bulk read's one fixed horizon. */
export const horizonQuery = sql.type(z.object({ horizon: z.string() }))`select es_read_horizon()::text as horizon`;
