import { z } from 'zod';
import { sql, type Queryable } from '../../shared/db/pool.ts';
import type { Migration } from '../../shared/db/migrate.ts';
import { comparePositions, type GlobalPosition, type RecordedEvent } from '../../shared/event-store/port.ts';

/**
 * Events a projection applied after later ones: by `projections retry` (right after the
 * checkpoint the live projector held) or last in a rebuild's swap (after the swap's position).
 * A rebuild applies each of them at the same point again (`createApplyOrder`), so a model that
 * numbers its rows in the order applied (the change feed's `seq`) keeps that order across
 * rebuilds, and cursors into it mean the same before and after. One row per projection and
 * event, the latest point; kept across versions (the order is the model's history, not code).
 */
export const lateAppliesMigration: Migration = {
  id: 'projections/004-late-applies',
  sql: `
    create table projection_late_applies (
      projection text not null,
      event_id text not null,
      after_commit numeric(20, 0) not null,
      after_prepare numeric(20, 0) not null,
      recorded_at timestamptz not null default now(),
      primary key (projection, event_id)
    );
  `,
};

/** Records that `eventIds` were applied right after `after` (in the caller's transaction). */
export async function recordLateApplies(tx: Queryable, name: string, eventIds: readonly string[], after: GlobalPosition): Promise<void> {
  if (eventIds.length === 0) return;
  await tx.query(sql.type(z.object({}))`
    insert into projection_late_applies (projection, event_id, after_commit, after_prepare)
    select ${name}, id, ${after.commit.toString()}, ${after.prepare.toString()} from unnest(${sql.array([...eventIds], 'text')}) as id
    on conflict (projection, event_id) do update set
      after_commit = excluded.after_commit, after_prepare = excluded.after_prepare, recorded_at = now()
  `);
}

/** Every recorded late apply of the projection: event id → the position it was applied after. */
export async function readLateApplies(db: Queryable, name: string): Promise<Map<string, GlobalPosition>> {
  const rows = await db.any(sql.type(z.object({ event_id: z.string(), after_commit: z.string(), after_prepare: z.string() }))`
    select event_id, after_commit::text, after_prepare::text from projection_late_applies where projection = ${name}
  `);
  return new Map(rows.map((r) => [r.event_id, { commit: BigInt(r.after_commit), prepare: BigInt(r.after_prepare) }]));
}

/** Where a held event goes: right after a position, or at the very end (`null`: parked in the live model). */
type At = GlobalPosition | null;
const compareAt = (a: At, b: At): number => (a === null ? (b === null ? 0 : 1) : b === null ? -1 : comparePositions(a, b));
const laterAt = (a: At, b: At): At => (compareAt(a, b) >= 0 ? a : b);

export type ApplyOrder = {
  /**
   * The next events of the log (in log order), as the runs to apply in turn: events applied
   * late are held back (with the later events of their streams) and come out as a run of their
   * own, in front of the first event past their point.
   */
  runs(events: readonly RecordedEvent[]): RecordedEvent[][];
  /** Everything still held, in order (at the end of the log: the swap). */
  rest(): RecordedEvent[];
  /** The held state, to restore when a transaction that took some of it is run again. */
  save(): () => void;
};

/**
 * The order a rebuild applies the log in, so that it matches the live model's: every event at
 * its position, except those `late` names (applied right after a later position) and those
 * parked in the live model (`parkedLive`, read when asked: applied at the end). Events of a
 * stream with an event held wait behind it, so each stream keeps its order.
 */
export function createApplyOrder(late: ReadonlyMap<string, GlobalPosition>, parkedLive: () => ReadonlySet<string>): ApplyOrder {
  let held: Array<{ event: RecordedEvent; at: At }> = [];
  const heldStream = (streamId: string): At | undefined => {
    let at: At | undefined;
    for (const h of held) if (h.event.streamId === streamId) at = at === undefined ? h.at : laterAt(at, h.at);
    return at;
  };
  const hold = (event: RecordedEvent, at: At) => {
    // Sorted by point, then log order (a stream's held events share its latest point).
    let i = held.length;
    while (i > 0) {
      const before = held[i - 1];
      if (!before || compareAt(before.at, at) <= 0) break;
      i--;
    }
    held.splice(i, 0, { event, at });
  };
  const takeDue = (position: GlobalPosition): RecordedEvent[] => {
    let n = 0;
    while (n < held.length) {
      const h = held[n];
      if (!h || h.at === null || comparePositions(h.at, position) >= 0) break;
      n++;
    }
    return held.splice(0, n).map((h) => h.event);
  };
  return {
    runs(events) {
      const out: RecordedEvent[][] = [];
      let current: RecordedEvent[] = [];
      const parked = parkedLive();
      for (const event of events) {
        const due = takeDue(event.position);
        if (due.length > 0) {
          if (current.length > 0) out.push(current);
          out.push(due);
          current = [];
        }
        const own: At | undefined = parked.has(event.id) ? null : late.get(event.id);
        const stream = held.length > 0 ? heldStream(event.streamId) : undefined;
        if (own === undefined && stream === undefined) current.push(event);
        else hold(event, own === undefined ? (stream as At) : stream === undefined ? own : laterAt(own, stream));
      }
      if (current.length > 0) out.push(current);
      return out;
    },
    rest() {
      const all = held.map((h) => h.event);
      held = [];
      return all;
    },
    save() {
      const copy = [...held];
      return () => {
        held = [...copy];
      };
    },
  };
}
