import {
  createPool,
  createDateTypeParser,
  createIntervalTypeParser,
  SchemaValidationError,
  sql,
  type DatabasePool,
  type DatabaseTransactionConnection,
  type Interceptor,
  type QueryResultRow,
} from 'slonik';
import { z } from 'zod';
import { parsePostgresTimestamp } from './timestamps.ts';

export { sql };

/**
 * The row schema of a statement whose rows the caller does not read. One shared instance: a zod
 * schema built per call costs more CPU than a small statement's round trip, since zod also compiles
 * each new instance's parser on its first row.
 */
export const ignoredRows = z.object({});

/** The row of a statement that answers the id of each row it touched (`returning id`). */
export const idRow = z.object({ id: z.string() });
export type { DatabasePool, DatabaseTransactionConnection };
/** Anything that can run a query: the pool, a pooled connection or a transaction. */
export type Queryable = Pick<
  DatabasePool,
  'any' | 'many' | 'maybeOne' | 'one' | 'oneFirst' | 'maybeOneFirst' | 'query' | 'exists' | 'anyFirst'
>;

/**
 * slonik only records the schema given to `sql.type`; this interceptor is what actually
 * validates each row at the read boundary (without it nothing is checked).
 */
const validateRows: Interceptor = {
  name: 'validate-rows',
  transformRowAsync: async (context, query, row) => {
    const parser = context.resultParser;
    if (!parser) return row;
    const result = await parser['~standard'].validate(row);
    if (result.issues) {
      throw new SchemaValidationError(query, row, result.issues);
    }
    return result.value as QueryResultRow;
  },
};

// Exact for every year (`new Date('0045-03-01 00:00:00+00')` is 2045).
const isoTimestamp = (value: string | null) => (value === null ? null : parsePostgresTimestamp(value));
const isoTimestampWithoutZone = (value: string | null) => (value === null ? null : parsePostgresTimestamp(value, { assumeUtc: true }));

/**
 * How column text becomes values, for every pool of the service: slonik's (`createDatabasePool`)
 * and the plain pg ones (`pgTypeParsers`, e.g. the tenant reader).
 */
const TYPE_PARSERS = [
  // Counts and revisions fit in a double; JSON cannot carry BigInt.
  { name: 'int8', parse: (v: string) => Number(v) },
  // Money stays exact as text; callers decide how to do arithmetic on it.
  { name: 'numeric', parse: (v: string) => v },
  // Our own parser: `new Date(text)` misreads years < 100 and some historic offsets.
  { name: 'timestamptz', parse: isoTimestamp },
  { name: 'timestamp', parse: isoTimestampWithoutZone },
  createDateTypeParser(),
  createIntervalTypeParser(),
];

/** The OIDs of those built-in types, for a plain pg pool. */
const TYPE_OIDS: Readonly<Record<string, number>> = {
  int8: 20,
  numeric: 1700,
  timestamptz: 1184,
  timestamp: 1114,
  date: 1082,
  interval: 1186,
};

/** The same parsing for a plain `pg.Pool` (its `types` option); other types keep pg's own parsers. */
export function pgTypeParsers(builtins: { getTypeParser(oid: number, format?: 'text' | 'binary'): unknown }) {
  const byOid = new Map(TYPE_PARSERS.map((t) => [TYPE_OIDS[t.name], t.parse]));
  return {
    getTypeParser(oid: number, format?: string) {
      return byOid.get(oid) ?? builtins.getTypeParser(oid, format === 'binary' ? 'binary' : 'text');
    },
  };
}

export type CreateDatabasePoolOptions = {
  readonly maximumPoolSize?: number;
  readonly statementTimeoutMs?: number;
  readonly applicationName?: string;
};

export async function createDatabasePool(url: string, options: CreateDatabasePoolOptions = {}): Promise<DatabasePool> {
  const connectionUri = new URL(url);
  if (options.applicationName) connectionUri.searchParams.set('application_name', options.applicationName);
  const pool = await createPool(connectionUri.toString(), {
    maximumPoolSize: options.maximumPoolSize ?? 10,
    statementTimeout: options.statementTimeoutMs ?? 30_000,
    idleInTransactionSessionTimeout: 60_000,
    interceptors: [validateRows],
    // slonik's default runs `DISCARD ALL` on every release: one more round trip per query. We
    // leave no session state behind (tenant and role are set with `set_config(..., true)`, i.e.
    // per transaction; advisory locks are released explicitly), so there is nothing to discard.
    resetConnection: async () => undefined,
    typeParsers: [...TYPE_PARSERS],
  });
  connectionUrls.set(pool, url);
  return pool;
}

const connectionUrls = new WeakMap<DatabasePool, string>();

/** The connection string a pool was made from, for work slonik cannot do (COPY of a bulk load). */
export function connectionUrlOf(pool: DatabasePool): string | undefined {
  return connectionUrls.get(pool);
}

/** Role that tenant-scoped work runs as, so row-level security applies (created by migrations). */
export const TENANT_ROLE = 'eas_tenant';

/**
 * Runs `work` in a transaction scoped to one tenant: as the non-owner role, with
 * `app.tenant_id` set for that transaction only. Row-level security policies read it,
 * so a query that forgets its tenant filter still sees nothing of another tenant.
 */
export async function withTenant<T>(
  pool: DatabasePool,
  tenantId: string,
  work: (tx: DatabaseTransactionConnection) => Promise<T>,
  options: { readonly snapshot?: boolean } = {},
): Promise<T> {
  return pool.transaction(async (tx) => {
    // `snapshot`: a read of several statements that must all see one state of the data (under
    // read committed each statement sees the commits made before it). Must come first.
    if (options.snapshot) await tx.query(sql.type(ignoredRows)`set transaction isolation level repeatable read, read only`);
    await tx.query(sql.type(ignoredRows)`
      select set_config('app.tenant_id', ${tenantId}, true), set_config('role', ${TENANT_ROLE}, true)
    `);
    return work(tx);
  });
}
