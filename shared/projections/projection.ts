import type { FragmentSqlToken, IdentifierSqlToken } from 'slonik';
import type { Queryable } from '../db/pool.ts';
import type { RecordedEvent } from '../event-store/port.ts';

/**
 * A projection, declared: what it is called, its version, which events it reads, which tables
 * it owns, and a handler that writes SQL inside the transaction it is given. The runner owns
 * the rest (batching, checkpoints in the same transaction, rebuilds into shadow tables).
 */
export type Projection<Table extends string = string> = {
  readonly name: string;
  /** Bump to rebuild the read model from the first event (e.g. after changing its shape). */
  readonly version: number;
  readonly eventTypes: readonly string[];
  /**
   * DDL for each table, one statement per fragment. `table` is the physical name to create
   * (the live name or a shadow generation), `named` makes index/constraint names unique to it.
   */
  readonly tables: Readonly<Record<Table, TableDefinition>>;
  /**
   * Applies a batch, in order. The runner hands each event over exactly once per model build.
   * `tx` is the page's transaction: a slonik transaction, or on the live fast path the page
   * pipeline (pagePipeline.ts), which runs the same statements with slonik's query methods.
   */
  handle(tx: Queryable, events: readonly RecordedEvent[], tables: Readonly<Record<Table, IdentifierSqlToken>>): Promise<void>;
  /**
   * Whether each live page waits for its commit to reach disk (`synchronous_commit = on`) before
   * readers can see it. Without (the default), a database crash can take back the last pages a
   * reader has already seen, until the projector applies them again from the log: harmless for a
   * model read by value, not for one whose rows name positions clients keep and hand back (the
   * change feed's cursors, which would be answered as unknown meanwhile).
   */
  readonly durablePages?: boolean;
  /**
   * Optional bulk path for rebuilds: the runner folds the log in memory with it and loads the
   * resulting rows in one go (then builds each table's `afterLoad` indexes), instead of calling
   * `handle` page by page. Must produce exactly what `handle` would have written.
   */
  readonly bulk?: BulkReplay<Table>;
};

/**
 * Either the statements that create a table, or those split into what must exist before rows
 * are written (`create`: the table, its policies and grants) and what a bulk load builds after
 * the rows are in (`afterLoad`: primary key, indexes): building an index once over loaded rows
 * is far cheaper than maintaining it row by row.
 */
export type TableDefinition = (
  table: IdentifierSqlToken,
  named: (suffix: string) => IdentifierSqlToken,
) => readonly FragmentSqlToken[] | { readonly create: readonly FragmentSqlToken[]; readonly afterLoad: readonly FragmentSqlToken[] };

/** Rows for one table: column names, their PostgreSQL types (for `unnest`) and the values, in column order. */
export type BulkRows = {
  readonly columns: readonly string[];
  readonly types: readonly string[];
  readonly rows: readonly (readonly (string | number | null)[])[];
};

export type BulkFold<Table extends string> = {
  /** Folds the next events of the log (in global order) into memory. */
  add(events: readonly RecordedEvent[]): void;
  /** Every table's rows after all the events added so far. */
  rows(): Readonly<Record<Table, BulkRows>>;
};

export type BulkReplay<Table extends string> = {
  /** A fresh, empty fold for one rebuild. */
  fold(): BulkFold<Table>;
};

export function defineProjection<Table extends string>(projection: Projection<Table>): Projection<Table> {
  return projection;
}
