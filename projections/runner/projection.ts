import type { FragmentSqlToken, IdentifierSqlToken } from 'slonik';
import type { DatabaseTransactionConnection } from '../../shared/db/pool.ts';
import type { RecordedEvent } from '../../shared/event-store/port.ts';

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
  /** Applies a batch, in order. The runner hands each event over exactly once per model build. */
  handle(tx: DatabaseTransactionConnection, events: readonly RecordedEvent[], tables: Readonly<Record<Table, IdentifierSqlToken>>): Promise<void>;
};

export type TableDefinition = (table: IdentifierSqlToken, named: (suffix: string) => IdentifierSqlToken) => readonly FragmentSqlToken[];

export function defineProjection<Table extends string>(projection: Projection<Table>): Projection<Table> {
  return projection;
}
