import { z } from 'zod';
import { ignoredRows, sql, type Queryable } from '../db/pool.ts';
import { comparePositions, type GlobalPosition, type RecordedEvent } from '../event-store/port.ts';

/**
 * Events a projection applied after later ones: by `projections retry` (right after the
 * checkpoint the live projector held) or last in a rebuild's swap (after the swap's position).
 * A rebuild applies each of them at the same point again (`createApplyOrder`), so a model that
 * numbers its rows in the order applied (the change feed's `seq`) keeps that order across
 * rebuilds, and cursors into it mean the same before and after. One row per projection and
 * event, the latest point; kept across versions (the order is the model's history, not code).
 */
/**
 * Records that `eventIds` were applied, in this order, right after `after` (in the caller's
 * transaction). `ordinal` grows with every record, so events recorded at the same point (two
 * retries with nothing committed between them) keep the order they were applied in.
 */
export async function recordLateApplies(tx: Queryable, name: string, eventIds: readonly string[], after: GlobalPosition): Promise<void> {
  if (eventIds.length === 0) return;
  await tx.query(sql.type(ignoredRows)`
    insert into projection_late_applies (projection, event_id, after_commit, after_prepare)
    select ${name}, u.id, ${after.commit.toString()}, ${after.prepare.toString()}
    from unnest(${sql.array([...eventIds], 'text')}) with ordinality as u(id, n)
    order by u.n
    on conflict (projection, event_id) do update set
      after_commit = excluded.after_commit, after_prepare = excluded.after_prepare, ordinal = excluded.ordinal, recorded_at = now()
  `);
}

/** Where an event was applied late: right after `after`, as the `ordinal`-th such record. */
export type LateApply = { readonly after: GlobalPosition; readonly ordinal: bigint };

const appliedOrderRow = z.object({ event_id: z.string(), after_commit: z.string(), after_prepare: z.string(), ordinal: z.string() });

/** Every recorded late apply of the projection, by event id. */
export async function readLateApplies(db: Queryable, name: string): Promise<Map<string, LateApply>> {
  const rows = await db.any(sql.type(appliedOrderRow)`
    select event_id, after_commit::text, after_prepare::text, ordinal::text from projection_late_applies where projection = ${name}
  `);
  return new Map(
    rows.map((r) => [
      r.event_id,
      { after: { commit: BigInt(r.after_commit), prepare: BigInt(r.after_prepare) }, ordinal: BigInt(r.ordinal) },
    ]),
  );
}

/** Where a held event goes: a recorded late apply, or (`null`: parked in the live model) the very end. */
type At = LateApply | null;
const compareAt = (a: At, b: At): number => {
  if (a === null || b === null) return a === b ? 0 : a === null ? 1 : -1;
  return comparePositions(a.after, b.after) || (a.ordinal < b.ordinal ? -1 : a.ordinal > b.ordinal ? 1 : 0);
};
const laterAt = (a: At, b: At): At => (compareAt(a, b) >= 0 ? a : b);

export type ApplyOrder = {
  /**
   * The next events of the log (in log order), as the runs to apply in turn: events applied
   * late are held back (with the later events of their streams) and come out as a run of their
   * own, in front of the first event past their point.
   */
  runs(events: readonly RecordedEvent[]): RecordedEvent[][];
  /**
   * Everything still held, in order, at the end of the log (the swap): `late`, the recorded late
   * applies whose point no event passed, then `parked`, the live model's parked events and the
   * events held behind them.
   */
  rest(): { late: RecordedEvent[]; parked: RecordedEvent[] };
  /** The held state, to restore when a transaction that took some of it is run again. */
  save(): () => void;
  /** The ids of the events held (not yet handed out). */
  heldIds(): Set<string>;
};

/**
 * The order a rebuild applies the log in, so that it matches the live model's: every event at
 * its position, except those `late` names (applied right after a later position, in the order
 * recorded) and those parked in the live model (`parkedLive`, read at every call: applied at the
 * end). Events of a stream with an event held wait behind it, so each stream keeps its order.
 * Held events are kept sorted by where they go (a stream's held events never go before its
 * earlier ones), then in log order; a map gives each stream's latest point, so the cost per
 * event does not grow with what is held.
 */
export function createApplyOrder(late: ReadonlyMap<string, LateApply>, parkedLive: () => { has(eventId: string): boolean }): ApplyOrder {
  let held: Array<{ event: RecordedEvent; at: At }> = [];
  let streams = new Map<string, { at: At; count: number }>();
  const hold = (event: RecordedEvent, at: At) => {
    // After every held event that goes at or before `at` (binary search; held is sorted).
    let lo = 0;
    let hi = held.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const h = held[mid];
      if (h && compareAt(h.at, at) <= 0) lo = mid + 1;
      else hi = mid;
    }
    held.splice(lo, 0, { event, at });
    const stream = streams.get(event.streamId);
    streams.set(event.streamId, { at: stream ? laterAt(stream.at, at) : at, count: (stream?.count ?? 0) + 1 });
  };
  const release = (n: number): RecordedEvent[] => {
    const out = held.splice(0, n).map((h) => h.event);
    for (const event of out) {
      const stream = streams.get(event.streamId);
      if (stream && stream.count > 1) streams.set(event.streamId, { at: stream.at, count: stream.count - 1 });
      else streams.delete(event.streamId);
    }
    return out;
  };
  const takeDue = (position: GlobalPosition): RecordedEvent[] => {
    let n = 0;
    while (n < held.length) {
      const h = held[n];
      if (!h || h.at === null || comparePositions(h.at.after, position) >= 0) break;
      n++;
    }
    return n === 0 ? [] : release(n);
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
        const stream = streams.get(event.streamId)?.at;
        if (own === undefined && stream === undefined) current.push(event);
        else hold(event, own === undefined ? (stream as At) : stream === undefined ? own : laterAt(own, stream));
      }
      if (current.length > 0) out.push(current);
      return out;
    },
    rest() {
      const all = held;
      held = [];
      streams = new Map();
      return { late: all.filter((h) => h.at !== null).map((h) => h.event), parked: all.filter((h) => h.at === null).map((h) => h.event) };
    },
    heldIds: () => new Set(held.map((h) => h.event.id)),
    save() {
      const heldCopy = [...held];
      const streamsCopy = new Map(streams);
      return () => {
        held = [...heldCopy];
        streams = new Map(streamsCopy);
      };
    },
  };
}
