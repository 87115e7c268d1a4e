import type { QuerySqlToken } from 'slonik';

/**
 * slonik statements on plain pg connections (the tenant reader, the projector's page pipeline):
 * the statement text as pg wants it, and rows checked against the token's schema as slonik's
 * row interceptor would (pool.ts), but synchronously, once each.
 */

/**
 * slonik numbers its placeholders `$slonik_N`; pg wants `$N`. Rewritten once per statement text
 * (our statements are a few dozen shapes, rewritten on every read and every page otherwise);
 * past MAX_TEXTS distinct texts the rest are rewritten each time.
 */
export const pgText = (query: QuerySqlToken): string => {
  let text = texts.get(query.sql);
  if (text === undefined) {
    text = query.sql.replace(/\$slonik_(\d+)/g, '$$$1');
    if (texts.size < MAX_TEXTS) texts.set(query.sql, text);
  }
  return text;
};
const MAX_TEXTS = 1_024;
const texts = new Map<string, string>();

/**
 * Names for prepared statements, one per distinct statement text: a statement prepared once
 * per connection spares PostgreSQL its parse and analysis on every run. The texts are our own
 * statements, a few dozen shapes; past `max` distinct texts the rest run unnamed.
 */
export function statementNames(prefix: string, max = 256): (query: QuerySqlToken) => string | undefined {
  const names = new Map<string, string>();
  return (query) => {
    let name = names.get(query.sql);
    if (name === undefined && names.size < max) {
      name = `${prefix}_${names.size + 1}`;
      names.set(query.sql, name);
    }
    return name;
  };
}

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
