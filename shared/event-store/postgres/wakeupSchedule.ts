/**
 * When an event store's commits wake live readers (a NOTIFY on `es_events`), for the PostgreSQL
 * adapter's group commit.
 *
 * A flush carries the wake-up in its own transaction when the last one is at least `intervalMs`
 * old. A NOTIFY in a transaction of its own after every flush costs a commit of its own (see
 * docs/decisions/002-group-commit-and-batch-append.md), and NOTIFY holds a cluster-wide lock through its transaction's commit, so flushes of
 * several gateways that all carried one would commit one after another.
 *
 * A flush that appended without carrying one owes a wake-up: a NOTIFY sent on its own (`send`)
 * at most `intervalMs` after the last wake-up (at the next turn of the event loop if that is
 * already past). A flush that began after the owing flush settled, and carried a wake-up that
 * committed, pays the debt. So a reader waiting at the head hears of every commit at most
 * `intervalMs` late, and at once when commits are sparse.
 *
 * A flush that failed may have committed (a lost connection), so it owes a wake-up; if it
 * carried one, the flushes of the next `intervalMs` do not (PostgreSQL refuses NOTIFY while its
 * queue is full, and the adapter then sends the same appends again without one). A NOTIFY sent on
 * its own that fails lets the next flush carry one.
 */
type FlushOutcome = 'appended' | 'nothing appended' | 'failed';

export type WakeupClock = {
  now(): number;
  /** Calls `fn` after `ms` (at the next turn of the event loop when `ms` ≤ 0); returns a cancel. */
  later(fn: () => void, ms: number): () => void;
};

const systemClock: WakeupClock = {
  now: () => performance.now(),
  later(fn, ms) {
    if (ms > 0) {
      const handle = setTimeout(fn, ms);
      return () => clearTimeout(handle);
    }
    const handle = setImmediate(fn);
    return () => clearImmediate(handle);
  },
};

type FlushWake = { readonly carried: boolean; readonly after: number };

export function createWakeupSchedule(send: () => Promise<void>, intervalMs: number, clock: WakeupClock = systemClock) {
  if (!Number.isFinite(intervalMs) || intervalMs < 0 || intervalMs > 60_000) {
    throw new Error(`wakeIntervalMs must be between 0 and 60000 ms (got ${intervalMs})`);
  }
  let last = Number.NEGATIVE_INFINITY;
  /** Flushes settled so far; a flush notes the count when it begins. */
  let settled = 0;
  /**
   * The owed wake-up, while one is: the count after the latest flush that owes it, and how to
   * cancel its timer.
   */
  let owed: { since: number; readonly cancel: () => void } | undefined;
  const sending = new Set<Promise<void>>();

  const fire = () => {
    owed = undefined;
    last = clock.now();
    const sent = send().catch(() => {
      // Not delivered: let the next flush carry one.
      last = Number.NEGATIVE_INFINITY;
    });
    sending.add(sent);
    void sent.finally(() => sending.delete(sent));
  };
  const owe = () => {
    if (owed) owed.since = settled;
    else owed = { since: settled, cancel: clock.later(fire, last + intervalMs - clock.now()) };
  };

  return {
    /** For a flush about to be sent: whether it carries the wake-up (never if it may not). */
    begin(mayCarry = true): FlushWake {
      return { carried: mayCarry && clock.now() - last >= intervalMs, after: settled };
    },
    /** For a flush that settled: what it did (a flush that failed may have committed). */
    settle(flush: FlushWake, outcome: FlushOutcome): void {
      settled++;
      if (flush.carried) last = clock.now();
      if (outcome === 'failed' || (!flush.carried && outcome === 'appended')) {
        owe();
      } else if (flush.carried && owed && flush.after >= owed.since) {
        // A wake-up that committed after the owing flush settled pays the debt.
        owed.cancel();
        owed = undefined;
      }
    },
    /** Sends an owed wake-up now, and waits for those sent. */
    async close(): Promise<void> {
      if (owed) {
        owed.cancel();
        fire();
      }
      await Promise.all(sending);
    },
  };
}
