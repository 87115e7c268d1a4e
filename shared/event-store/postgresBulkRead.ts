import { z } from 'zod';
import type { QuerySqlToken } from 'slonik';
import { sql, type DatabasePool } from '../db/pool.ts';
import { START, type BulkReadOptions, type GlobalPosition, type ReadAllPage, type RecordedEvent } from './port.ts';

/**
 * The PostgreSQL adapter's bulk read for rebuilds (`EventStore.readAllBulk`).
 *
 * The horizon is taken once: everything up to the last entry below it has committed (or
 * aborted), so the pages after it need neither the horizon query nor a scan window. Each page
 * is ONE row: PostgreSQL shapes the events into a JSON array (fixed column order, timestamps
 * already in `toISOString()` form), so the client parses one string per page instead of
 * decoding and validating every row and field (the per-row async validation cost more than
 * the query; see docs/benchmarks.md). The next page is fetched while the caller works on the
 * current one.
 */
const DEFAULT_PAGE_SIZE = 20_000;

const endRow = z.object({ commit: z.string(), prepare: z.number() });
const pageRow = z.object({ page: z.string(), n: z.number() });

/** [event_id, stream_id, revision, type, data, metadata, transaction_id, position, recorded_at] */
type Tuple = [string, string, number, string, unknown, Record<string, unknown>, string, number, string];

const isTuple = (value: unknown): value is Tuple =>
  Array.isArray(value) &&
  value.length === 9 &&
  typeof value[0] === 'string' &&
  typeof value[1] === 'string' &&
  typeof value[2] === 'number' &&
  typeof value[3] === 'string' &&
  typeof value[5] === 'object' &&
  value[5] !== null &&
  typeof value[6] === 'string' &&
  typeof value[7] === 'number' &&
  typeof value[8] === 'string';

/** Validates the page's shape once, synchronously (SQL built it), and maps it to recorded events. */
function toEvents(text: string): RecordedEvent[] {
  const parsed: unknown = JSON.parse(text);
  if (!Array.isArray(parsed)) throw new Error('bulk read: page is not an array');
  const events: RecordedEvent[] = new Array(parsed.length);
  for (let i = 0; i < parsed.length; i++) {
    const t: unknown = parsed[i];
    if (!isTuple(t)) throw new Error(`bulk read: malformed event at index ${i} of the page`);
    events[i] = {
      id: t[0],
      streamId: t[1],
      revision: t[2],
      type: t[3],
      data: t[4],
      metadata: t[5],
      position: { commit: BigInt(t[6]), prepare: BigInt(t[7]) },
      recordedAt: t[8],
    };
  }
  return events;
}

/** `horizonQuery`: the adapter's read horizon (postgres.ts), one `horizon` column (xid8 as text). */
export async function* readAllBulk(
  pool: DatabasePool,
  horizonQuery: QuerySqlToken<z.ZodObject<{ horizon: z.ZodString }>>,
  options: BulkReadOptions = {},
): AsyncGenerator<ReadAllPage> {
  const pageSize = options.pageSize ?? DEFAULT_PAGE_SIZE;
  let after: GlobalPosition = options.after ?? START;
  const horizon = await pool.oneFirst(horizonQuery);
  const endRowValue = await pool.maybeOne(sql.type(endRow)`
    select transaction_id::text as commit, position as prepare from es_events
    where transaction_id < ${horizon}::xid8
    order by transaction_id desc, position desc limit 1
  `);
  if (!endRowValue) return;
  const end: GlobalPosition = { commit: BigInt(endRowValue.commit), prepare: BigInt(endRowValue.prepare) };
  if (end.commit < after.commit || (end.commit === after.commit && end.prepare <= after.prepare)) return;

  const typeFilter = options.eventTypes ? sql.fragment`and type = any(${sql.array([...options.eventTypes], 'text')})` : sql.fragment``;
  const fetchPage = (from: GlobalPosition) =>
    pool.one(sql.type(pageRow)`
      select coalesce(json_agg(json_build_array(
               event_id, stream_id, revision, type, data, metadata, transaction_id::text, position,
               to_char(recorded_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
             order by transaction_id, position), '[]')::text as page,
             count(*)::int as n
      from (
        select * from es_events
        where (transaction_id, position) > (${from.commit.toString()}::xid8, ${from.prepare.toString()}::int8)
          and (transaction_id, position) <= (${end.commit.toString()}::xid8, ${end.prepare.toString()}::int8)
          ${typeFilter}
        order by transaction_id, position limit ${pageSize}
      ) e
    `);

  let pending = fetchPage(after);
  for (;;) {
    if (options.signal?.aborted) throw new Error('bulk read aborted');
    const row = await pending;
    const events = toEvents(row.page);
    const last = events.at(-1);
    const full = row.n === pageSize && last !== undefined;
    // Full page: there may be more, fetch it while the caller folds this one.
    if (full) {
      pending = fetchPage(last.position);
      pending.catch(() => undefined); // awaited on the next turn; only keeps an abandoned read quiet
    }
    after = full ? last.position : end;
    yield { events, checkpoint: after };
    if (!full) return;
  }
}
