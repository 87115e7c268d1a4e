import { z } from 'zod';
import { sql, type DatabasePool } from '../db/pool.ts';
import type { GlobalPosition } from '../event-store/port.ts';

/** A projection's checkpoint row (projection_checkpoints): its built version and where it stands in the log. */
export const checkpointRow = z.object({
  version: z.number(),
  commit_position: z.string(),
  prepare_position: z.string(),
  events_applied: z.number(),
  updated_at: z.string(),
});

export type Checkpoint = {
  readonly name: string;
  readonly version: number;
  readonly position: GlobalPosition;
  readonly eventsApplied: number;
  readonly updatedAt: string;
};

export const toCheckpoint = (name: string, row: z.infer<typeof checkpointRow>): Checkpoint => ({
  name,
  version: row.version,
  position: { commit: BigInt(row.commit_position), prepare: BigInt(row.prepare_position) },
  eventsApplied: row.events_applied,
  updatedAt: row.updated_at,
});

/** The projection's checkpoint, or null when it was never built; `lock` takes its row `for update`. */
export async function readCheckpoint(db: Pick<DatabasePool, 'maybeOne'>, name: string, lock = false): Promise<Checkpoint | null> {
  const row = await db.maybeOne(sql.type(checkpointRow)`
    select version, commit_position::text, prepare_position::text, events_applied, updated_at
    from projection_checkpoints where name = ${name} ${lock ? sql.fragment`for update` : sql.fragment``}
  `);
  return row ? toCheckpoint(name, row) : null;
}
