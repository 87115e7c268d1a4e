import { describe, expect, it } from 'vitest';
import { createWakeupSchedule, type WakeupClock } from '../../../../shared/event-store/postgres/wakeupSchedule.ts';

/**
 * When the PostgreSQL adapter's commits wake live readers: a flush carries the NOTIFY
 * when the last wake-up is old enough, and otherwise owes one that goes alone at most the
 * interval later. A manual clock, so every step is exact.
 */
function manualClock() {
  let now = 1_000;
  let timers: Array<{ at: number; fn: () => void; cancelled: boolean }> = [];
  const clock: WakeupClock = {
    now: () => now,
    later(fn, ms) {
      const timer = { at: now + Math.max(0, ms), fn, cancelled: false };
      timers.push(timer);
      return () => {
        timer.cancelled = true;
      };
    },
  };
  return {
    clock,
    /** Moves the clock on, running the timers that fall due, in order. */
    advance(ms: number) {
      const until = now + ms;
      for (;;) {
        const due = timers.filter((t) => !t.cancelled && t.at <= until).sort((a, b) => a.at - b.at)[0];
        if (!due) break;
        now = due.at;
        timers = timers.filter((t) => t !== due);
        due.fn();
      }
      now = until;
    },
    /** Moves the clock on without running timers (an event loop busy elsewhere). */
    skip(ms: number) {
      now += ms;
    },
    pending: () => timers.filter((t) => !t.cancelled).length,
  };
}

function schedule(intervalMs = 5, sendResult: () => Promise<void> = async () => undefined) {
  const time = manualClock();
  const sent: number[] = [];
  const wakeups = createWakeupSchedule(
    () => {
      sent.push(time.clock.now());
      return sendResult();
    },
    intervalMs,
    time.clock,
  );
  return { time, sent, wakeups };
}

describe('the wake-up schedule of group commit', () => {
  it('lets the first flush carry the wake-up, and one that comes soon after owe one, sent the interval after the last', () => {
    const { time, sent, wakeups } = schedule(5);
    const first = wakeups.begin();
    expect(first.carried).toBe(true);
    wakeups.settle(first, 'appended');
    time.advance(2);
    const second = wakeups.begin();
    expect(second.carried).toBe(false);
    wakeups.settle(second, 'appended');
    time.advance(2);
    const third = wakeups.begin();
    wakeups.settle(third, 'appended'); // owes too: one wake-up for both
    expect(sent).toEqual([]);
    time.advance(10);
    expect(sent).toEqual([1_005]); // 5 ms after the first flush's wake-up
  });

  it('owes nothing for a flush that appended nothing and carried nothing', () => {
    const { time, sent, wakeups } = schedule(5);
    wakeups.settle(wakeups.begin(), 'appended');
    wakeups.settle(wakeups.begin(), 'nothing appended');
    time.advance(50);
    expect(sent).toEqual([]);
    expect(time.pending()).toBe(0);
  });

  it('lets a flush that began after the owing one settled pay its debt by carrying a wake-up', () => {
    const { time, sent, wakeups } = schedule(5);
    wakeups.settle(wakeups.begin(), 'appended'); // carried at 1,000
    time.advance(4);
    wakeups.settle(wakeups.begin(), 'appended'); // owes, due at 1,005
    // The event loop is busy past 1,005: a flush begins before the timer runs, and carries one.
    time.skip(1.5);
    const later = wakeups.begin();
    expect(later.carried).toBe(true);
    wakeups.settle(later, 'appended');
    expect(time.pending()).toBe(0);
    time.advance(50);
    expect(sent).toEqual([]);
  });

  it('keeps the debt when the carrying flush began before the owing one settled (two lanes)', () => {
    const { time, sent, wakeups } = schedule(5);
    wakeups.settle(wakeups.begin(), 'appended');
    time.advance(6);
    const carrying = wakeups.begin(); // lane 1, carries
    const owing = { carried: false, after: carrying.after }; // lane 2, began at the same time
    wakeups.settle(owing, 'appended'); // settles first and owes
    wakeups.settle(carrying, 'appended'); // its commit may come before lane 2's: the debt stays
    expect(time.pending()).toBe(1);
    time.advance(5);
    expect(sent).toHaveLength(1);
  });

  it('owes a wake-up for a failed flush, which may have committed, and lets its retries go without one', () => {
    const { time, sent, wakeups } = schedule(5);
    wakeups.settle(wakeups.begin(), 'appended');
    time.advance(10);
    const failed = wakeups.begin();
    expect(failed.carried).toBe(true);
    wakeups.settle(failed, 'failed'); // e.g. 54000: the notification queue is full
    const retry = wakeups.begin();
    expect(retry.carried).toBe(false);
    wakeups.settle(retry, 'appended');
    time.advance(5);
    expect(sent).toEqual([1_015]);

    // A flush that did not carry and was lost mid-commit owes one too.
    time.advance(1);
    wakeups.settle(wakeups.begin(), 'failed');
    time.advance(5);
    expect(sent).toEqual([1_015, 1_020]);
    // A flush that may not carry one (the adapter's resend after 54000) never does.
    time.advance(10);
    expect(wakeups.begin().carried).toBe(true);
    expect(wakeups.begin(false).carried).toBe(false);
  });

  it('lets the next flush carry a wake-up when one sent alone fails', async () => {
    const { time, sent, wakeups } = schedule(5, () => Promise.reject(new Error('notify connection lost')));
    wakeups.settle(wakeups.begin(), 'appended');
    time.advance(1);
    wakeups.settle(wakeups.begin(), 'appended');
    time.advance(5);
    expect(sent).toHaveLength(1);
    await wakeups.close(); // waits for the failed send
    expect(wakeups.begin().carried).toBe(true);
  });

  it('sends an owed wake-up at once on close', async () => {
    const { time, sent, wakeups } = schedule(60_000);
    wakeups.settle(wakeups.begin(), 'appended');
    time.advance(1);
    wakeups.settle(wakeups.begin(), 'appended');
    await wakeups.close();
    expect(sent).toEqual([1_001]);
    expect(time.pending()).toBe(0);
  });

  it('lets every flush carry one with an interval of 0, and refuses an interval it cannot keep', () => {
    const { wakeups } = schedule(0);
    for (let i = 0; i < 3; i++) {
      const flush = wakeups.begin();
      expect(flush.carried).toBe(true);
      wakeups.settle(flush, 'appended');
    }
    for (const bad of [-1, Number.NaN, Number.POSITIVE_INFINITY, 3_000_000]) {
      expect(() => createWakeupSchedule(async () => undefined, bad)).toThrow(/wakeIntervalMs/);
    }
  });
});
