import pg from 'pg';
import type { QuerySqlToken } from 'slonik';
import { pgStatements, validatedRows } from '../db/pgStatements.ts';
import type { Queryable } from '../db/pool.ts';
import { breaksConnection, connectionLostError, createPlainConnection } from '../db/plainConnection.ts';
import { sqlStateOf } from '../db/sqlState.ts';

/**
 * The live projector's page transaction in two writes instead of four or more.
 *
 * Through slonik a page is BEGIN, the checkpoint's compare-and-set, the handler's statements and
 * COMMIT, each a round trip of its own: a socket write, a wake-up of the PostgreSQL backend, a
 * reply. Under a steady write load those socket writes are a large share of the projector's CPU,
 * and its PostgreSQL backends' wake-ups cost more than the gateway's appends.
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
 * Since the handler's statements leave before the compare-and-set has answered, a page whose
 * checkpoint another instance has moved still runs them, and they are rolled back.
 *
 * Like slonik's transactions, a page that meets a serialization failure or a deadlock runs
 * again at once (up to RETRIES_IN_PLACE times). A page whose connection was lost fails with
 * SQLSTATE 08006, which the runner retries as transient.
 *
 * Rows are checked against each statement's schema (`sql.type`) synchronously, as the tenant
 * reader does; types are parsed as in the main pool (`pgTypeParsers`: its scalar types; arrays
 * of them keep pg's own parsing, which no handler reads). A connection that fails other than
 * with a PostgreSQL error (socket closed, a value pg cannot send) is dropped; the next page
 * opens a new one.
 *
 * The compare-and-set and the handlers' statements are prepared once per connection
 * (`pgStatements`): a page then sends no statement text, and PostgreSQL neither parses nor,
 * once it keeps a generic plan, plans them again (unnamed, the upsert and the compare-and-set
 * would be planned on every page). A prepared
 * statement is planned again when a table it reads is altered, dropped or swapped (PostgreSQL
 * analyses its text anew), so a replay's table swap needs nothing from here, as long as the
 * columns a statement returns keep their types (a same-version replay keeps the tables' shape;
 * otherwise PostgreSQL refuses with 0A000 and the page fails).
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

/**
 * A page that lost its connection fails as a connection failure (SQLSTATE class 08), which the
 * runner retries as transient, whichever of pg's errors told of it first.
 */
const connectionLost = (cause: unknown) => connectionLostError('page pipeline: the connection was lost during the page', cause);

/** SQLSTATEs on which a page is simply run again at once, as slonik's transactions do. */
const RETRY_IN_PLACE = new Set(['40001', '40P01']);
const RETRIES_IN_PLACE = 5;

/** Each statement's text and name as pages send it (one set per process, the same names on every connection). */
const statementOf = pgStatements('projector_page');

export function createPagePipeline(
  url: string,
  options: { readonly applicationName?: string; readonly statementTimeoutMs?: number } = {},
): PagePipeline {
  const plain = createPlainConnection(url, {
    applicationName: options.applicationName ?? 'employee-analytics-projector',
    ...(options.statementTimeoutMs !== undefined && { statementTimeoutMs: options.statementTimeoutMs }),
  });

  /** One run of a page (see `page`). */
  const runPage = async (compareAndSet: QuerySqlToken, handle: (tx: Queryable) => Promise<void>): Promise<unknown[] | undefined> => {
    let connection = await plain.get();
    if (connection.getTransactionStatus() !== 'I') {
      // Not idle (it should always be, between pages): start over on a new connection.
      plain.drop(connection);
      connection = await plain.get();
    }
    // The first failure of the page, in the order PostgreSQL answered: the cause, where the
    // statements behind it only report the aborted transaction (25P02).
    let failure: { readonly error: unknown } | undefined;
    let sound = true;
    const send = ({ text, name }: { readonly text: string; readonly name?: string | undefined }, values: readonly unknown[] = []): Sent => {
      const config: pg.QueryConfig & { readonly queryMode: 'extended' } = {
        text,
        values: [...values],
        queryMode: 'extended',
        ...(name !== undefined && { name }),
      };
      const sent = connection.query<Record<string, unknown>>(config);
      sent.catch((error: unknown) => {
        failure ??= { error };
        if (breaksConnection(error)) sound = false;
      });
      return sent;
    };
    const tx = pageQueryable(async (query) => {
      const result = await send(statementOf(query), query.values);
      return {
        rows: validatedRows(query, result.rows, 'page pipeline'),
        rowCount: result.rowCount ?? 0,
        command: result.command,
        fields: [],
        notices: [],
        type: 'QueryResult',
      };
    });

    // BEGIN, the compare-and-set and what the handler sends before it first waits: one write.
    const stream = connection.connection.stream;
    let moved: Sent;
    let handled: Promise<void>;
    stream.cork();
    try {
      void send({ text: 'begin' });
      moved = send(statementOf(compareAndSet), compareAndSet.values);
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
        await send({ text: 'rollback' });
        return undefined;
      }
      const committed = await send({ text: 'commit' });
      // COMMIT of an aborted transaction answers ROLLBACK, without an error.
      if (committed.command !== 'COMMIT') throw new Error(`page pipeline: COMMIT answered ${committed.command}`);
      return checkpoint;
    } catch (error) {
      const cause = failure ? failure.error : error;
      // A ROLLBACK that PostgreSQL does not answer means the connection is gone.
      const rolledBack = await send({ text: 'rollback' }).then(
        () => true,
        (rollbackError: unknown) => rollbackError instanceof pg.DatabaseError,
      );
      if (!rolledBack || plain.isLost(connection)) throw connectionLost(cause);
      throw cause;
    } finally {
      // Every statement of the page has answered by now (the last one sent was awaited).
      if (!sound) plain.drop(connection);
    }
  };

  return {
    async page(compareAndSet, handle) {
      for (let attempt = 1; ; attempt++) {
        try {
          return await runPage(compareAndSet, handle);
        } catch (error) {
          const state = sqlStateOf(error);
          if (attempt >= RETRIES_IN_PLACE || state === undefined || !RETRY_IN_PLACE.has(state)) throw error;
        }
      }
    },
    end: () => plain.end(),
  };
}

/**
 * slonik's query methods over `query` (one statement's whole result, its rows validated), so
 * that a projection's handler runs unchanged on the pipeline or in a slonik transaction.
 */
function pageQueryable(query: (query: QuerySqlToken) => Promise<{ readonly rows: unknown[] }>): Queryable {
  const rows = async (token: QuerySqlToken) => (await query(token)).rows;
  const one = async (token: QuerySqlToken, allowNone: boolean) => {
    const found = await rows(token);
    if (found.length > 1) throw new Error(`page pipeline: expected at most one row, got ${found.length}`);
    if (found.length === 0 && !allowNone) throw new Error('page pipeline: expected one row, got none');
    return found[0] ?? null;
  };
  const first = (row: unknown) => {
    if (row === null) return null;
    const values = Object.values(row as Record<string, unknown>);
    if (values.length !== 1) throw new Error(`page pipeline: expected one column, got ${values.length}`);
    return values[0];
  };
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
