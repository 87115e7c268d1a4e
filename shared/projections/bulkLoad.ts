import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import type { FragmentSqlToken, IdentifierSqlToken } from 'slonik';
import { ignoredRows, sql, type DatabasePool } from '../db/pool.ts';
import type { BulkRows } from './projection.ts';

/**
 * Writes a bulk replay's rows into fresh shadow tables, then builds their keys and indexes, in
 * ONE transaction with `synchronous_commit = off` (a crash loses nothing: the next replay drops
 * the shadow tables and starts over; the swap that readers depend on stays synchronous).
 *
 * With the pool's connection string at hand the rows go in with COPY on a plain pg connection
 * (pg-copy-streams): PostgreSQL's cheapest way in, about twice as fast here as the fallback,
 * multi-row inserts of one `unnest` array per column through slonik.
 */
export type BulkTable = {
  readonly table: IdentifierSqlToken;
  /** The physical table name (COPY takes no slonik identifier). */
  readonly name: string;
  readonly rows: BulkRows;
  readonly afterLoad: readonly FragmentSqlToken[];
};

/**
 * Settings of a rebuild's own transactions. Losing one to a crash loses nothing: the shadow
 * tables are dropped and rebuilt by the next replay, and the swap (the only transaction readers
 * depend on) stays synchronous. No statement timeout: one statement loads or indexes a whole
 * table; the build holds its advisory lock, not row locks readers wait on. No values, so its
 * text alone runs on a plain connection too.
 */
export const rebuildTransactionSettings = sql.type(ignoredRows)`
  select set_config('synchronous_commit', 'off', true), set_config('statement_timeout', '0', true),
         set_config('maintenance_work_mem', '256MB', true), set_config('work_mem', '64MB', true)
`;

/** Rows per multi-row insert of the fallback. */
const INSERT_ROWS = 20_000;
/** Rows per chunk handed to the COPY stream. */
const COPY_CHUNK_ROWS = 2_000;

const SPECIAL = /[\\\t\n\r]/;

/** COPY text format: `\N` for null, backslash escapes for the characters COPY treats specially. */
const escapeCopy = (value: string): string =>
  SPECIAL.test(value) ? value.replace(/\\/g, '\\\\').replace(/\t/g, '\\t').replace(/\n/g, '\\n').replace(/\r/g, '\\r') : value;

/**
 * The rows as COPY text, in chunks, each row appended field by field (no per-row arrays of
 * strings): building a string per row with .map and .join costs about twice as much.
 */
function* copyChunks(rows: BulkRows): Generator<string> {
  const width = rows.columns.length;
  for (let i = 0; i < rows.rows.length; i += COPY_CHUNK_ROWS) {
    let chunk = '';
    const end = Math.min(rows.rows.length, i + COPY_CHUNK_ROWS);
    for (let r = i; r < end; r++) {
      const row = rows.rows[r];
      if (!row) continue;
      for (let c = 0; c < width; c++) {
        const value = row[c];
        if (c > 0) chunk += '\t';
        if (value === null || value === undefined) chunk += '\\N';
        else if (typeof value === 'number') chunk += value;
        else chunk += escapeCopy(value);
      }
      chunk += '\n';
    }
    yield chunk;
  }
}

const quoteIdent = (name: string) => `"${name.replace(/"/g, '""')}"`;

export async function bulkLoad(
  connection: Pick<DatabasePool, 'transaction'>,
  connectionUrl: string | undefined,
  tables: readonly BulkTable[],
): Promise<void> {
  if (!connectionUrl) {
    await connection.transaction(async (tx) => {
      await tx.query(rebuildTransactionSettings);
      for (const { table, rows, afterLoad } of tables) {
        const columns = sql.join(
          rows.columns.map((c) => sql.identifier([c])),
          sql.fragment`, `,
        );
        for (let i = 0; i < rows.rows.length; i += INSERT_ROWS) {
          await tx.query(sql.type(ignoredRows)`
            insert into ${table} (${columns}) select * from ${sql.unnest(rows.rows.slice(i, i + INSERT_ROWS), [...rows.types])}
          `);
        }
        for (const statement of afterLoad) await tx.query(sql.type(ignoredRows)`${statement}`);
      }
    });
    return;
  }
  const client = new pg.Client({ connectionString: connectionUrl, application_name: 'projection-bulk-load' });
  await client.connect();
  try {
    await client.query('begin');
    await client.query(rebuildTransactionSettings.sql);
    for (const { name, rows, afterLoad } of tables) {
      const columns = rows.columns.map(quoteIdent).join(', ');
      await pipeline(Readable.from(copyChunks(rows)), client.query(copyFrom(`copy ${quoteIdent(name)} (${columns}) from stdin`)));
      // The statements are slonik fragments of the projection's own DDL (no bound values).
      for (const statement of afterLoad) {
        if (statement.values.length > 0) throw new Error('afterLoad statements must not bind values');
        await client.query(statement.sql);
      }
    }
    await client.query('commit');
  } catch (error) {
    await client.query('rollback').catch(() => undefined);
    throw error;
  } finally {
    await client.end();
  }
}
