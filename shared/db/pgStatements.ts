import type { QuerySqlToken } from 'slonik';

/**
 * slonik statements on plain pg connections (the tenant reader, the projector's page pipeline):
 * the statement text as pg wants it, and rows checked against the token's schema as slonik's
 * row interceptor would (pool.ts), but synchronously, once each.
 */

/** A slonik statement as pg takes it: its text, and a prepared statement's name if it has one. */
export type PgStatement = { readonly text: string; readonly name: string | undefined };

/**
 * Per statement text, what pg sends: slonik numbers its placeholders `$slonik_N`, pg wants `$N`;
 * and a name, so that the statement is prepared once per connection and PostgreSQL need not
 * parse and analyse it on every run. Both are worked out once per text, in one lookup. The texts
 * are our own statements, a few dozen shapes; past `max` distinct texts the rest run unnamed
 * (their text rewritten each time).
 */
export function pgStatements(prefix: string, max = 256): (query: QuerySqlToken) => PgStatement {
  const statements = new Map<string, PgStatement>();
  return (query) => {
    let statement = statements.get(query.sql);
    if (statement === undefined) {
      statement = {
        text: query.sql.replace(/\$slonik_(\d+)/g, '$$$1'),
        name: statements.size < max ? `${prefix}_${statements.size + 1}` : undefined,
      };
      if (statement.name !== undefined) statements.set(query.sql, statement);
    }
    return statement;
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
