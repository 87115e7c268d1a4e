import pg from 'pg';
import type { QuerySqlToken } from 'slonik';
import { z } from 'zod';
import { sql, type DatabasePool } from '../../db/pool.ts';
import { START, type BulkReadOptions, type GlobalPosition, type ReadAllPage, type RecordedEvent } from '../port.ts';

/**
 * The PostgreSQL adapter's bulk read for rebuilds (`EventStore.readAllBulk`).
 *
 * The horizon is taken once: everything up to the last entry below it has committed (or
 * aborted), so the pages after it need neither the horizon query nor a scan window. Pages are
 * read on one plain pg connection in array row mode with every column as text (no per-row
 * async validation, no per-field type parsing beyond what the event needs): the slonik path
 * (per-row zod validation in an async interceptor) costs more than the query itself, and
 * letting PostgreSQL shape each page as one JSON document costs the server more than a plain
 * scan. SQL fixes each column's shape, so a page is checked once, synchronously. The next page is
 * requested before the caller folds the current one, so PostgreSQL and Node work in parallel.
 */
const DEFAULT_PAGE_SIZE = 10_000;

const endRow = z.object({ commit: z.string(), prepare: z.number() });

/** Every column as its text form: the bulk path parses only what it uses. */
const asText = { getTypeParser: () => (value: string) => value };

// Aliased: an output column named like an input column would take over ORDER BY (text order!).
const COLUMNS = `e.event_id::text as id, e.stream_id, e.revision::text as rev, e.type, e.data::text as data_text,
  e.metadata::text as metadata_text, e.transaction_id::text as commit_text, e.position::text as prepare_text,
  to_char(e.recorded_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as recorded_at`;

/**
 * One row as an event. A rebuild's fold runs on this process's one thread while PostgreSQL
 * waits, so what PostgreSQL can shape it shapes (the
 * ISO instant), and what most folds never read is parsed on first use: `metadata` is a getter
 * on the event itself (an own property, so spreading the event keeps it).
 */
function toEvent(row: unknown, index: number): RecordedEvent {
  if (!Array.isArray(row) || row.length !== 9) throw new Error(`bulk read: malformed event row at index ${index} of the page`);
  for (let i = 0; i < 9; i++) {
    const value: unknown = row[i];
    if (typeof value !== 'string' && !(i === 4 && value === null))
      throw new Error(`bulk read: malformed event row at index ${index} of the page`);
  }
  // Checked above: nine strings, only the data may be null.
  const [id, streamId, revision, type, data, metadataText, commit, prepare, recordedAt] = row as [
    string,
    string,
    string,
    string,
    string | null,
    string,
    string,
    string,
    string,
  ];
  let metadata: Record<string, unknown> | undefined;
  return {
    id,
    streamId,
    revision: Number(revision),
    type,
    data: JSON.parse(data ?? 'null') as unknown,
    get metadata() {
      metadata ??= JSON.parse(metadataText) as Record<string, unknown>;
      return metadata;
    },
    position: { commit: BigInt(commit), prepare: BigInt(prepare) },
    recordedAt,
  };
}

/**
 * `horizonQuery`: the adapter's read horizon (rows.ts), one `horizon` column (xid8 as text).
 * `connectionUrl`: where the plain pg connection for the pages goes (the pool's own database).
 */
export async function* readAllBulk(
  pool: DatabasePool,
  connectionUrl: string,
  horizonQuery: QuerySqlToken<z.ZodObject<{ horizon: z.ZodString }>>,
  options: BulkReadOptions = {},
): AsyncGenerator<ReadAllPage> {
  const pageSize = options.pageSize ?? DEFAULT_PAGE_SIZE;
  const after: GlobalPosition = options.after ?? START;
  const horizon = await pool.oneFirst(horizonQuery);
  const endRowValue = await pool.maybeOne(sql.type(endRow)`
    select transaction_id::text as commit, position as prepare from es_events
    where transaction_id < ${horizon}::xid8
    order by transaction_id desc, position desc limit 1
  `);
  if (!endRowValue) return;
  const end: GlobalPosition = { commit: BigInt(endRowValue.commit), prepare: BigInt(endRowValue.prepare) };
  if (end.commit < after.commit || (end.commit === after.commit && end.prepare <= after.prepare)) return;

  const types = options.eventTypes ? [...options.eventTypes] : null;
  const text = `select ${COLUMNS} from es_events e
    where (e.transaction_id, e.position) > ($1::xid8, $2::int8) and (e.transaction_id, e.position) <= ($3::xid8, $4::int8)
      ${types ? 'and e.type = any($6::text[])' : ''}
    order by e.transaction_id, e.position limit $5::int`;
  const client = new pg.Client({ connectionString: connectionUrl, application_name: 'event-store-bulk-read' });
  await client.connect();
  try {
    const fetchPage = (from: GlobalPosition) =>
      client.query<unknown[]>({
        text,
        values: [
          from.commit.toString(),
          from.prepare.toString(),
          end.commit.toString(),
          end.prepare.toString(),
          pageSize,
          ...(types ? [types] : []),
        ],
        rowMode: 'array',
        types: asText,
      });
    let pending = fetchPage(after);
    for (;;) {
      if (options.signal?.aborted) throw new Error('bulk read aborted');
      const { rows } = await pending;
      const events = rows.map(toEvent);
      const last = events.at(-1);
      const full = rows.length === pageSize && last !== undefined;
      if (full) {
        pending = fetchPage(last.position);
        pending.catch(() => undefined); // awaited on the next turn; only keeps an abandoned read quiet
      }
      yield { events, checkpoint: full ? last.position : end };
      if (!full) return;
    }
  } finally {
    await client.end();
  }
}
