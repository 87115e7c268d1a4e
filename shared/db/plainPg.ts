import type { QuerySqlToken } from 'slonik';

/**
 * slonik statements on plain pg connections (the tenant reader, the projector's page pipeline):
 * the statement text as pg wants it, and rows checked against the token's schema as slonik's
 * row interceptor would (pool.ts), but synchronously, once each.
 */

/** slonik numbers its placeholders `$slonik_N`; pg wants `$N`. */
export const pgText = (query: QuerySqlToken): string => query.sql.replace(/\$slonik_(\d+)/g, '$$$1');

/** `rows` validated by `query`'s schema (`sql.type(schema)`); `who` names the caller in errors. */
export function validatedRows(query: QuerySqlToken, rows: readonly Record<string, unknown>[], who: string): unknown[] {
  const validate = query.parser['~standard'].validate;
  return rows.map((row, i) => {
    const result = validate(row);
    if (result instanceof Promise) throw new Error(`${who}: row schemas must validate synchronously`);
    if (result.issues) throw new Error(`${who}: row ${i} does not match its schema: ${result.issues.map((x) => x.message).join('; ')}`);
    return result.value;
  });
}
