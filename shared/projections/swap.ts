import { ignoredRows, sql, type DatabaseTransactionConnection } from '../db/pool.ts';
import type { GlobalPosition } from '../event-store/port.ts';
import { recordLateApplies } from './applyOrder.ts';
import type { Checkpoint } from './checkpoints.ts';
import type { Projection } from './projection.ts';

export type SwapIn = {
  /** The checkpoint row as read (and locked) in the swap's transaction. */
  readonly stored: Checkpoint | null;
  readonly generation: string;
  readonly shadowName: (logical: string) => string;
  /** The log position the shadow tables were built up to. */
  readonly swapPosition: GlobalPosition;
  /** Every event this build parked (its pages and the swap). */
  readonly parkedHere: ReadonlySet<string>;
  /** Events parked in the live model that the swap applied last. */
  readonly lateIds: readonly string[];
  readonly eventsApplied: number;
};

/**
 * The swap's statements, inside the transaction that holds the live checkpoint row: records
 * the late applies, closes the parked rows the new model now holds, renames the shadow tables
 * over the live ones and moves the checkpoint. Readers see the old model or the new one, never
 * a mix.
 */
export async function swapIn(tx: DatabaseTransactionConnection, projection: Projection<string>, swap: SwapIn): Promise<void> {
  const { stored, generation, shadowName, swapPosition, parkedHere, lateIds, eventsApplied } = swap;
  await recordLateApplies(tx, projection.name, lateIds, swapPosition);
  // Events of this version parked before (a previous run of this replay, or the live
  // projector when the same version is rebuilt) that this build applied are no longer
  // parked: the new model has them. Those it parked again stay one row each (parkEvent upserts).
  await tx.query(sql.type(ignoredRows)`
    update projection_parked_events set status = 'retried', resolved_at = now()
    where projection = ${projection.name} and version = ${projection.version} and status = 'parked'
      and (commit_position, prepare_position) <= (${swapPosition.commit.toString()}::numeric, ${swapPosition.prepare.toString()}::numeric)
      and not (event_id = any(${sql.array([...parkedHere], 'text')}))
  `);
  // On a version bump, the live version's parked rows of the events this build applied last.
  if (stored && stored.version !== projection.version && lateIds.length > 0) {
    await tx.query(sql.type(ignoredRows)`
      update projection_parked_events set status = 'retried', resolved_at = now()
      where projection = ${projection.name} and version = ${stored.version} and status = 'parked'
        and event_id = any(${sql.array(lateIds, 'text')})
    `);
  }
  for (const logical of Object.keys(projection.tables)) {
    const live = sql.identifier([logical]);
    const retired = sql.identifier([`${logical}__retired_${generation}`]);
    await tx.query(sql.type(ignoredRows)`alter table if exists ${live} rename to ${retired}`);
    await tx.query(sql.type(ignoredRows)`alter table ${sql.identifier([shadowName(logical)])} rename to ${live}`);
    await tx.query(sql.type(ignoredRows)`drop table if exists ${retired}`);
  }
  await tx.query(sql.type(ignoredRows)`
    insert into projection_checkpoints (name, version, commit_position, prepare_position, events_applied, updated_at)
    values (${projection.name}, ${projection.version}, ${swapPosition.commit.toString()}, ${swapPosition.prepare.toString()},
      ${eventsApplied}, now())
    on conflict (name) do update set version = excluded.version, commit_position = excluded.commit_position,
      prepare_position = excluded.prepare_position, events_applied = excluded.events_applied, updated_at = now()
  `);
}
