import pg from 'pg';
import type { QuerySqlToken } from 'slonik';
import { pgStatements, validatedRows } from './pgStatements.ts';
import { TENANT_ROLE, pgTypeParsers, type Queryable } from './pool.ts';
import { breaksConnection } from './plainConnection.ts';

/**
 * Tenant-scoped reads without a transaction: the cheap path for hot list pages.
 *
 * `withTenant` wraps a read in BEGIN, set_config, the statement(s), COMMIT: four or more
 * sequential round trips through slonik, whose per-query work (interceptors, an async zod
 * validation per row) costs several times the statement itself. This
 * reader is a small plain pg pool whose connections are the tenant role from their first moment
 * (`-c role=eas_tenant` in the startup options) and read-only by default, so row-level security
 * applies to everything it runs.
 *
 * Every statement travels with its own tenant setting, in one write and one round trip:
 * `set_config('app.tenant_id', $1, true)` (transaction-local, the tenant id bound) and the
 * statement go out as one extended-protocol batch with a single Sync, so PostgreSQL runs both in
 * one implicit transaction. The statement cannot run under another tenant's setting (if the
 * setting fails, PostgreSQL skips the statement), and nothing stays on the idle connection (the
 * setting ends with that transaction). (`SET LOCAL` would do the same but logs a warning per
 * read: outside an explicit transaction block PostgreSQL warns about it.) Statements are still slonik
 * tokens (every value bound); rows are checked against the token's schema synchronously, once
 * each, with the same type parsing as the main pool (`pgTypeParsers`).
 *
 * Hand-written on pg's own Query (its submit prefixed with three protocol messages) because no
 * client API sends two statements under one Sync: pg's pipeline mode ends each query with its
 * own Sync (a failed setting would not stop the statement behind it, as
 * test/shared/db/tenantReader.test.ts shows), and a separate `set_config` round trip is one more
 * round trip on every list page.
 *
 * Like `withTenant`, this is a wall against a query that forgets its tenant filter, not against
 * arbitrary SQL (connected as a superuser, SQL could `SET ROLE` back): nothing but our own
 * statements runs here.
 */
/** What a tenant read may do: `any` of a typed slonik statement (the same signature as slonik's). */
export type TenantQueryable = Pick<Queryable, 'any'>;

export type TenantReader = {
  /** Runs `work` on a connection scoped to `tenantId` (row-level security as the second wall). */
  read<T>(tenantId: string, work: (db: TenantQueryable) => Promise<T>): Promise<T>;
  end(): Promise<void>;
};

/** Tenant ids are uuids: anything else is refused before it reaches PostgreSQL, with a clear error. */
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * What of pg's connection this batch relies on besides its typed API (pg 8.x; pg's own Query
 * reads and writes the same two records): which named statements the server holds or has been
 * sent.
 */
type NamedStatements = { readonly parsedStatements: Record<string, string>; readonly submittedNamedStatements: Record<string, string> };

/**
 * `text` with `values`, preceded in the same batch (one Sync, one implicit transaction) by
 * `set_config('app.tenant_id', $1, true)`. Resolves with the statement's rows.
 *
 * Order on the wire: the statement's own Parse (when it is named and not yet prepared on this
 * connection), then the setting (Parse, Bind, Describe, Execute), then the statement (Bind,
 * Describe, Execute) and the Sync. pg marks a named statement as parsed on the batch's first
 * ParseComplete; sending the statement's Parse first makes that mark exact, whatever fails later
 * in the batch (a prepared statement outlives its transaction).
 */
function scopedRows(
  client: pg.PoolClient,
  tenantId: string,
  text: string,
  values: readonly unknown[],
  name: string | undefined,
): Promise<Record<string, unknown>[]> {
  if (!UUID.test(tenantId)) return Promise.reject(new Error(`tenant reader: tenant id is not a uuid: ${JSON.stringify(tenantId)}`));
  return new Promise((resolve, reject) => {
    // `extended` even without values: a simple-protocol Query message may not follow the
    // setting's unsynced messages.
    const config: pg.QueryConfig & { readonly queryMode: 'extended' } = {
      text,
      values: [...values],
      queryMode: 'extended',
      ...(name === undefined ? {} : { name }),
    };
    const query = new pg.Query(config, (error: Error | undefined, result: pg.ResultBuilder | pg.ResultBuilder[]) => {
      if (error) return reject(error);
      // Two results (the setting's, the statement's): the rows are the statement's.
      resolve((Array.isArray(result) ? result[result.length - 1] : result)?.rows ?? []);
    });
    const submitStatement = query.submit;
    query.submit = (connection) => {
      const named = connection as unknown as NamedStatements;
      connection.stream.cork();
      try {
        if (name !== undefined && named.parsedStatements[name] === undefined && named.submittedNamedStatements[name] === undefined) {
          connection.parse({ text, name, types: [] }, true);
          named.submittedNamedStatements[name] = text; // pg's Query now skips its own Parse
        }
        connection.parse({ text: `select from set_config('app.tenant_id', $1, true)`, name: '', types: [] }, true);
        connection.bind({ values: [tenantId] }, true);
        connection.describe({ type: 'P', name: '' }, true);
        connection.execute({}, true);
        // The statement's Bind, Describe, Execute and the one Sync.
        return submitStatement.call(query, connection);
      } finally {
        connection.stream.uncork();
      }
    };
    void client.query(query);
  });
}

/**
 * Statements are prepared once per connection (`pgStatements`); the connections plan each
 * execution afresh (`plan_cache_mode=force_custom_plan`), so a tenant's plan never comes from
 * another tenant's statistics.
 */
export async function createTenantReader(url: string, options: { readonly maximumPoolSize?: number } = {}): Promise<TenantReader> {
  const pool = new pg.Pool({
    connectionString: url,
    max: options.maximumPoolSize ?? 10,
    application_name: 'employee-analytics-reader',
    options: `-c role=${TENANT_ROLE} -c default_transaction_read_only=on -c statement_timeout=30000 -c plan_cache_mode=force_custom_plan`,
    types: pgTypeParsers(pg.types) as pg.CustomTypesConfig,
  });
  pool.on('error', () => undefined); // an idle connection dropped: the pool replaces it
  const statementOf = pgStatements('tenant_read');
  return {
    async read(tenantId, work) {
      const client = await pool.connect();
      // Set when the connection met an error PostgreSQL did not answer with (a value pg could not
      // bind, a broken socket), even if `work` caught it: the connection is then dropped.
      let unsound = false;
      const any = (async (query: QuerySqlToken) => {
        const { text, name } = statementOf(query);
        const rows = await scopedRows(client, tenantId, text, query.values, name).catch((error: unknown) => {
          if (breaksConnection(error)) unsound = true;
          throw error;
        });
        return validatedRows(query, rows, 'tenant reader');
      }) as TenantQueryable['any'];
      try {
        return await work({ any });
      } catch (error) {
        // Anything but an error PostgreSQL answered with drops the connection (unknown state).
        unsound ||= breaksConnection(error);
        throw error;
      } finally {
        client.release(unsound);
      }
    },
    end: () => pool.end(),
  };
}
