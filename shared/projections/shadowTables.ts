import { z } from 'zod';
import type { FragmentSqlToken, IdentifierSqlToken } from 'slonik';
import { ignoredRows, sql, type DatabasePool, type DatabaseTransactionConnection } from '../db/pool.ts';
import type { Projection } from './projection.ts';

/**
 * A projection's tables by physical name: the live tables carry the logical name, a rebuild's
 * shadow tables `<logical>__g<generation>` until the swap renames them over the live ones.
 */
export const tableIds = <T extends string>(projection: Projection<T>, physical: (logical: string) => string) =>
  Object.fromEntries(Object.keys(projection.tables).map((t) => [t, sql.identifier([physical(t)])])) as Record<T, IdentifierSqlToken>;

/** Each table's statements, split into what creates it and what a bulk load builds afterwards. */
export function tableStatements<T extends string>(projection: Projection<T>, physical: (logical: string) => string) {
  return (Object.entries(projection.tables) as [T, Projection<T>['tables'][T]][]).map(([logical, define]) => {
    const name = physical(logical);
    const statements = define(sql.identifier([name]), (suffix) => sql.identifier([`${name}_${suffix}`]));
    const split = 'create' in statements ? statements : { create: statements, afterLoad: [] };
    return { logical, table: sql.identifier([name]), ...split };
  });
}

export async function runStatements(
  tx: Pick<DatabaseTransactionConnection, 'query'>,
  statements: readonly FragmentSqlToken[],
): Promise<void> {
  for (const statement of statements) await tx.query(sql.type(ignoredRows)`${statement}`);
}

const staleTableRow = z.object({ name: z.string() });

/** The shadow and retired tables of `projection` there are now: a build's, running or killed. One catalogue read. */
export async function shadowTablesOf(
  connection: Pick<DatabasePool, 'anyFirst'>,
  projection: Projection<string>,
): Promise<readonly string[]> {
  const patterns = Object.keys(projection.tables).flatMap((logical) => [`${logical}\\_\\_g%`, `${logical}\\_\\_retired\\_%`]);
  return connection.anyFirst(sql.type(staleTableRow)`
    select tablename as name from pg_tables
    where schemaname = current_schema() and tablename like any(${sql.array(patterns, 'text')})
  `);
}

/** Shadow tables a killed replay left behind; safe to drop only under the replay lock. */
export async function dropAbandonedShadows(
  connection: Pick<DatabasePool, 'anyFirst' | 'query'>,
  projection: Projection<string>,
): Promise<void> {
  for (const name of await shadowTablesOf(connection, projection)) {
    await connection.query(sql.type(ignoredRows)`drop table if exists ${sql.identifier([name])}`);
  }
}

/** Drops a failed build's shadow tables (best effort: the next replay drops what is left). */
export async function dropShadows(
  connection: Pick<DatabasePool, 'transaction'>,
  projection: Projection<string>,
  shadowName: (logical: string) => string,
): Promise<void> {
  await connection
    .transaction(async (tx) => {
      for (const logical of Object.keys(projection.tables)) {
        await tx.query(sql.type(ignoredRows)`drop table if exists ${sql.identifier([shadowName(logical)])}`);
      }
    })
    .catch(() => undefined);
}
