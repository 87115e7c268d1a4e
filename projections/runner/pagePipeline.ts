import pg from 'pg';
import type { QuerySqlToken } from 'slonik';
import { pgText, validatedRows } from '../../shared/db/plainPg.ts';
import { pgTypeParsers, type Queryable } from '../../shared/db/pool.ts';

/**
 * The live projector's page transaction in two writes instead of four or more.
 *
 * Through slonik a page is BEGIN, the checkpoint's compare-and-set, the handler's statements and
 * COMMIT, each a round trip of its own: a socket write, a wake-up of the PostgreSQL backend, a
 * reply. Measured under the create load (issue 11), the projector process spent a third of its
 * CPU in those socket writes, and its PostgreSQL backends more CPU than the gateway's appends.
 * Here one connection per projection runs in pg's pipeline mode (each statement is sent without
 * waiting for the one before): BEGIN, the compare-and-set and the handler's first statement
 * leave in one write, and only COMMIT (or ROLLBACK) waits for their answers. A handler that
 * reads before it writes costs one more round trip, as before.
 *
 * Nothing about the transaction changes: the statements run in order inside one explicit
 * transaction block; a failed statement aborts the block (PostgreSQL refuses the rest), and the
 * page then ends with ROLLBACK and fails with the first error, whatever the handler caught. The
 * page commits only if the compare-and-set returned its row and COMMIT answered COMMIT.
 *
 * Rows are checked against each statement's schema (`sql.type`) synchronously, as the tenant
 * reader does. A connection that fails other than with a PostgreSQL error (socket closed, a
 * value pg cannot send) is dropped; the next page opens a new one.
 */
export type PagePipeline = {
  /**
   * Runs `handle` in a transaction after `compareAndSet`; commits if that statement returned a
   * row (its rows are returned), rolls back and returns undefined if it returned none.
   */
  page(compareAndSet: QuerySqlToken, handle: (tx: Queryable) => Promise<void>): Promise<unknown[] | undefined>;
  end(): Promise<void>;
};

type Sent = Promise<pg.QueryResult<Record<string, unknown>>>;

export function createPagePipeline(url: string, options: { readonly applicationName?: string; readonly statementTimeoutMs?: number } = {}): PagePipeline {
  let client: pg.Client | undefined;
  let connecting: Promise<pg.Client> | undefined;
  let ended = false;

  const drop = (dropped: pg.Client) => {
    if (client === dropped) client = undefined;
    dropped.end().catch(() => undefined);
  };
  const connect = (): Promise<pg.Client> => {
    if (client) return Promise.resolve(client);
    connecting ??= (async () => {
      const fresh = new pg.Client({
        connectionString: url,
        pipeline: true,
        application_name: options.applicationName ?? 'employee-analytics-projector',
        options: `-c statement_timeout=${options.statementTimeoutMs ?? 30_000} -c idle_in_transaction_session_timeout=60000`,
        types: pgTypeParsers(pg.types) as pg.CustomTypesConfig,
      });
      fresh.on('error', () => drop(fresh)); // lost while idle: the next page reconnects
      try {
        await fresh.connect();
      } catch (error) {
        fresh.end().catch(() => undefined);
        throw error;
      }
      if (ended) {
        drop(fresh);
        throw new Error('page pipeline ended');
      }
      client = fresh;
      return fresh;
    })().finally(() => {
      connecting = undefined;
    });
    return connecting;
  };

  return {
    async page(compareAndSet, handle) {
      const connection = await connect();
      // The first failure of the page, in the order PostgreSQL answered: the cause, where the
      // statements behind it only report the aborted transaction (25P02).
      let failure: { readonly error: unknown } | undefined;
      let sound = true;
      const send = (text: string, values: readonly unknown[] = []): Sent => {
        const config: pg.QueryConfig & { readonly queryMode: 'extended' } = { text, values: [...values], queryMode: 'extended' };
        const sent = connection.query<Record<string, unknown>>(config);
        sent.catch((error: unknown) => {
          failure ??= { error };
          if (!(error instanceof pg.DatabaseError)) sound = false;
        });
        return sent;
      };
      const rows = async (query: QuerySqlToken) => validatedRows(query, (await send(pgText(query), query.values)).rows, 'page pipeline');
      const tx = pageQueryable(rows, async (query) => {
        const result = await send(pgText(query), query.values);
        return { rows: validatedRows(query, result.rows, 'page pipeline'), rowCount: result.rowCount ?? 0, command: result.command, fields: [], notices: [], type: 'QueryResult' };
      });

      // BEGIN, the compare-and-set and what the handler sends before it first waits: one write.
      const stream = connection.connection.stream;
      let moved: Sent;
      let handled: Promise<void>;
      stream.cork();
      try {
        void send('begin');
        moved = send(pgText(compareAndSet), compareAndSet.values);
        try {
          handled = handle(tx);
        } catch (error) {
          handled = Promise.reject(error instanceof Error ? error : new Error(String(error)));
        }
      } finally {
        stream.uncork();
      }
      try {
        await handled;
        const checkpoint = validatedRows(compareAndSet, (await moved).rows, 'page pipeline');
        if (failure) throw failure.error; // a statement failed and the handler caught it
        if (checkpoint.length === 0) {
          await send('rollback');
          return undefined;
        }
        const committed = await send('commit');
        // COMMIT of an aborted transaction answers ROLLBACK, without an error.
        if (committed.command !== 'COMMIT') throw new Error(`page pipeline: COMMIT answered ${committed.command}`);
        return checkpoint;
      } catch (error) {
        await send('rollback').catch(() => undefined);
        throw failure ? failure.error : error;
      } finally {
        // Every statement of the page has answered by now (the last one sent was awaited).
        if (!sound) drop(connection);
      }
    },
    async end() {
      ended = true;
      const open = client ?? (await connecting?.catch(() => undefined));
      if (open) {
        client = undefined;
        await open.end().catch(() => undefined);
      }
    },
  };
}

/**
 * slonik's query methods over `rows` (and `query` for the whole result), so that a projection's
 * handler runs unchanged on the pipeline or in a slonik transaction.
 */
function pageQueryable(
  rows: (query: QuerySqlToken) => Promise<unknown[]>,
  query: (query: QuerySqlToken) => Promise<unknown>,
): Queryable {
  const one = async (token: QuerySqlToken, allowNone: boolean) => {
    const found = await rows(token);
    if (found.length > 1) throw new Error(`page pipeline: expected at most one row, got ${found.length}`);
    if (found.length === 0 && !allowNone) throw new Error('page pipeline: expected one row, got none');
    return found[0] ?? null;
  };
  const first = (row: unknown) => (row === null ? null : Object.values(row as Record<string, unknown>)[0]);
  const methods = {
    any: rows,
    many: async (token: QuerySqlToken) => {
      const found = await rows(token);
      if (found.length === 0) throw new Error('page pipeline: expected rows, got none');
      return found;
    },
    maybeOne: (token: QuerySqlToken) => one(token, true),
    one: (token: QuerySqlToken) => one(token, false),
    maybeOneFirst: async (token: QuerySqlToken) => first(await one(token, true)),
    oneFirst: async (token: QuerySqlToken) => first(await one(token, false)),
    anyFirst: async (token: QuerySqlToken) => (await rows(token)).map(first),
    exists: async (token: QuerySqlToken) => (await rows(token)).length > 0,
    query,
  };
  return methods as unknown as Queryable;
}
