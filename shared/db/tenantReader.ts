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
 * applies to everything it runs. A read sets `app.tenant_id` for the session and runs its one
 * statement: two round trips, no BEGIN/COMMIT. Statements are still slonik tokens (every value
 * bound); rows are checked against the token's schema synchronously, once each, with the same
 * type parsing as the main pool (`pgTypeParsers`).
 *
 * The setting stays on the idle connection; the next read overwrites it before running
 * anything, and `read` is the only way to use the pool. Like `withTenant`, this is a wall against
 * a query that forgets its tenant filter, not against arbitrary SQL (connected as a superuser,
 * SQL could `SET ROLE` back): nothing but our own statements runs here.
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

export async function createTenantReader(url: string, options: { readonly maximumPoolSize?: number } = {}): Promise<TenantReader> {
  const pool = new pg.Pool({
    connectionString: url,
    max: options.maximumPoolSize ?? 10,
    application_name: 'employee-analytics-reader',
    options: `-c role=${TENANT_ROLE} -c default_transaction_read_only=on -c statement_timeout=30000`,
    types: pgTypeParsers(pg.types) as pg.CustomTypesConfig,
  });
  pool.on('error', () => undefined); // an idle connection dropped: the pool replaces it
  const any = (client: pg.PoolClient) =>
    (async (query: QuerySqlToken) => {
      const { rows } = await client.query<Record<string, unknown>>(pgText(query), [...query.values]);
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
        await client.query(`select set_config('app.tenant_id', $1, false)`, [tenantId]);
        return await work({ any: any(client) });
      } catch (error) {
        // Anything but an error PostgreSQL answered with drops the connection (unknown state).
        broken = !(error instanceof pg.DatabaseError);
        throw error;
      } finally {
        client.release(broken);
      }
    },
    end: () => pool.end(),
  };
}
