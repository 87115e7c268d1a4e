import pg from 'pg';
import type { QuerySqlToken } from 'slonik';
import { TENANT_ROLE, pgTypeParsers, type Queryable } from './pool.ts';

/**
 * Tenant-scoped reads without a transaction: the cheap path for hot list pages.
 *
 * `withTenant` wraps a read in BEGIN, set_config, the statement(s), COMMIT: four or more
 * sequential round trips through slonik, whose per-query work (interceptors, an async zod
 * validation per row) measured here at several times the cost of the statement itself. This
 * reader is a small plain pg pool whose connections are the tenant role from their first moment
 * (`-c role=eas_tenant` in the startup options) and read-only by default, so row-level security
 * applies to everything it runs.
 *
 * Every statement travels with its own tenant setting, in one write and one round trip:
 * `SET LOCAL app.tenant_id` and the statement go out as one extended-protocol batch with a single
 * Sync, so PostgreSQL runs both in one implicit transaction. The statement cannot run under
 * another tenant's setting (if the SET fails, PostgreSQL skips the statement), and nothing stays
 * on the idle connection (the setting ends with that transaction). Statements are still slonik
 * tokens (every value bound); rows are checked against the token's schema synchronously, once
 * each, with the same type parsing as the main pool (`pgTypeParsers`).
 *
 * Hand-written on pg's own Query (its submit prefixed with three protocol messages) because no
 * client API sends two statements under one Sync: pg's pipeline mode ends each query with its
 * own Sync (a failed setting would not stop the statement behind it, measured in
 * test/shared/db/tenantReader.test.ts), and a separate `set_config` round trip cost the list
 * route about a tenth of its throughput (docs/benchmarks.md, "Cheap reads").
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

/** slonik numbers its placeholders `$slonik_N`; pg wants `$N`. */
const pgText = (query: QuerySqlToken) => query.sql.replace(/\$slonik_(\d+)/g, '$$$1');

/** Tenant ids are uuids; only a string of this exact shape is ever written into the SET command. */
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * `text` with `values`, preceded in the same batch (one Sync, one implicit transaction) by
 * `SET LOCAL app.tenant_id`. Resolves with the statement's rows.
 */
function scopedRows(client: pg.PoolClient, tenantId: string, text: string, values: readonly unknown[], name: string | undefined): Promise<Record<string, unknown>[]> {
  if (!UUID.test(tenantId)) return Promise.reject(new Error(`tenant reader: tenant id is not a uuid: ${JSON.stringify(tenantId)}`));
  // A SET takes no bind parameters; the value is a checked uuid, so the literal is safe.
  const setting = `set local app.tenant_id = '${tenantId.toLowerCase()}'`;
  return new Promise((resolve, reject) => {
    // `extended` even without values: a simple-protocol Query message may not follow the SET's
    // unsynced messages.
    const config: pg.QueryConfig & { readonly queryMode: 'extended' } = { text, values: [...values], queryMode: 'extended', ...(name === undefined ? {} : { name }) };
    const query = new pg.Query(config, (error: Error | undefined, result: pg.ResultBuilder | pg.ResultBuilder[]) => {
      if (error) return reject(error);
      // Two results (the SET's, the statement's): the rows are the statement's.
      resolve((Array.isArray(result) ? result[result.length - 1] : result)?.rows ?? []);
    });
    const submitStatement = query.submit;
    query.submit = (connection) => {
      connection.stream.cork();
      try {
        connection.parse({ text: setting, name: '', types: [] }, true);
        connection.bind({}, true);
        connection.execute({}, true);
        // The statement's Parse, Bind, Describe, Execute and the one Sync.
        return submitStatement.call(query, connection);
      } finally {
        connection.stream.uncork();
      }
    };
    void client.query(query);
  });
}

/**
 * Statements are prepared once per connection (a name per distinct text), which spares
 * PostgreSQL the parse and analysis of every read; the connections plan each execution afresh
 * (`plan_cache_mode=force_custom_plan`), so a tenant's plan never comes from another tenant's
 * statistics. The texts are our own statements, a few dozen shapes; past `MAX_PREPARED` distinct
 * texts the rest run unnamed.
 */
const MAX_PREPARED = 256;

/** SQLSTATE classes raised while executing, after the statement parsed: the connection stays. */
const EXECUTION_CLASSES = new Set(['22', '23', '40', '53', '54', '55', '57']);

export async function createTenantReader(url: string, options: { readonly maximumPoolSize?: number } = {}): Promise<TenantReader> {
  const pool = new pg.Pool({
    connectionString: url,
    max: options.maximumPoolSize ?? 10,
    application_name: 'employee-analytics-reader',
    options: `-c role=${TENANT_ROLE} -c default_transaction_read_only=on -c statement_timeout=30000 -c plan_cache_mode=force_custom_plan`,
    types: pgTypeParsers(pg.types) as pg.CustomTypesConfig,
  });
  pool.on('error', () => undefined); // an idle connection dropped: the pool replaces it
  const names = new Map<string, string>();
  const nameOf = (text: string) => {
    let name = names.get(text);
    if (name === undefined && names.size < MAX_PREPARED) names.set(text, (name = `tenant_read_${names.size + 1}`));
    return name;
  };
  const any = (client: pg.PoolClient, tenantId: string) =>
    (async (query: QuerySqlToken) => {
      const text = pgText(query);
      const rows = await scopedRows(client, tenantId, text, query.values, nameOf(text));
      const validate = query.parser['~standard'].validate;
      return rows.map((row, i) => {
        const result = validate(row);
        if (result instanceof Promise) throw new Error('tenant reader: row schemas must validate synchronously');
        if (result.issues) throw new Error(`tenant reader: row ${i} does not match its schema: ${result.issues.map((x) => x.message).join('; ')}`);
        return result.value;
      });
    }) as TenantQueryable['any'];
  return {
    async read(tenantId, work) {
      const client = await pool.connect();
      let broken = false;
      try {
        return await work({ any: any(client, tenantId) });
      } catch (error) {
        // Anything but an error PostgreSQL raised while executing drops the connection: its
        // state is unknown, or its record of prepared statements may be (an error while parsing).
        broken = !(error instanceof pg.DatabaseError && EXECUTION_CLASSES.has(error.code?.slice(0, 2) ?? ''));
        throw error;
      } finally {
        client.release(broken);
      }
    },
    end: () => pool.end(),
  };
}
