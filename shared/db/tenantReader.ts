import { z } from 'zod';
import { createDatabasePool, sql, TENANT_ROLE, type CreateDatabasePoolOptions, type Queryable } from './pool.ts';

/**
 * Tenant-scoped reads without a transaction: the cheap path for hot list pages.
 *
 * `withTenant` wraps a read in BEGIN, set_config, the statement(s), COMMIT: four or more
 * sequential round trips, and on this 2-core machine each one is mostly syscalls on both ends.
 * Here every connection of a separate pool is the tenant role from its first moment
 * (`-c role=eas_tenant` in the startup options) and read-only by default, so row-level security
 * applies to everything it runs. A read sets `app.tenant_id` for the session, then runs its
 * statement: two round trips, no BEGIN/COMMIT. The setting stays on the idle connection; the
 * next read overwrites it before running anything, and `read` is the only way to use the pool.
 *
 * Like `withTenant`, this is a wall against a query that forgets its tenant filter, not against
 * arbitrary SQL: connected as a superuser (tests, the embedded default), SQL could `SET ROLE`
 * back. Nothing but our own statements runs here.
 */
export type TenantReader = {
  /** Runs `work` on a connection scoped to `tenantId` (row-level security as the second wall). */
  read<T>(tenantId: string, work: (db: Queryable) => Promise<T>): Promise<T>;
  end(): Promise<void>;
};

export async function createTenantReader(url: string, options: CreateDatabasePoolOptions = {}): Promise<TenantReader> {
  const uri = new URL(url);
  uri.searchParams.set('options', `-c role=${TENANT_ROLE} -c default_transaction_read_only=on`);
  const pool = await createDatabasePool(uri.toString(), { applicationName: 'employee-analytics-reader', ...options });
  return {
    read: (tenantId, work) =>
      pool.connect(async (connection) => {
        await connection.query(sql.type(z.object({}))`select set_config('app.tenant_id', ${tenantId}, false)`);
        return work(connection);
      }),
    end: () => pool.end(),
  };
}
