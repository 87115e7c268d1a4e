import { describe, expect, it } from 'vitest';
import type { GlobalPosition, ReadAllOptions, ReadAllPage, RecordedEvent } from '../../../../shared/event-store/port.ts';
import { comparePositions, START } from '../../../../shared/event-store/port.ts';
import { createSharedTails } from '../../../../shared/event-store/postgres/sharedTail.ts';
import { waitFor } from '../../../support/waitFor.ts';

/**
 * The shared tail on its own, over an in-memory log that counts its reads: the
 * PostgreSQL adapter's integration is covered by postgres/sharedPages.test.ts. What matters here
 * is the count: subscribers at the head share one reader instead of each polling the head.
 */
function memoryLog(options: { readonly reportsHead?: boolean; readonly listening?: boolean } = {}) {
  const events: RecordedEvent[] = [];
  let generation = 0;
  let waiters: Array<() => void> = [];
  const stats = { reads: 0, emptyReads: 0 };
  let reading = 0;
  let waiting = 0;
  const readAll = async (opts: ReadAllOptions): Promise<ReadAllPage> => {
    stats.reads++;
    reading++;
    await new Promise((r) => setTimeout(r, 1)); // a read takes time, as a real one does
    reading--;
    const after = opts.after ?? START;
    const maxCount = opts.maxCount ?? 1_000;
    const page = events.filter((e) => comparePositions(e.position, after) > 0).slice(0, maxCount);
    if (page.length === 0) stats.emptyReads++;
    const checkpoint = page.at(-1)?.position ?? after;
    return options.reportsHead ? { events: page, checkpoint, atHead: page.length < maxCount } : { events: page, checkpoint };
  };
  const wakeups = {
    generation: () => generation,
    listening: () => options.listening ?? true,
    next: (seen: number, timeoutMs: number, signal?: AbortSignal) =>
      generation !== seen || signal?.aborted
        ? Promise.resolve()
        : new Promise<void>((resolve) => {
            waiting++;
            let pending = true;
            const done = () => {
              clearTimeout(timer);
              if (pending) waiting--;
              pending = false;
              resolve();
            };
            const timer = setTimeout(done, timeoutMs);
            waiters.push(done);
            signal?.addEventListener('abort', done, { once: true });
          }),
  };
  const append = (count: number) => {
    for (let i = 0; i < count; i++) {
      const n = events.length + 1;
      const position: GlobalPosition = { commit: BigInt(n), prepare: BigInt(n) };
      events.push({ id: `e${n}`, streamId: `s${n % 3}`, revision: 0, type: 'T', data: {}, metadata: {}, position, recordedAt: '' });
    }
    generation++;
    const woken = waiters;
    waiters = [];
    for (const wake of woken) wake();
  };
  /**
   * No read in flight and someone waits for a commit: every reader has settled at the head, and
   * nothing is read until the next append. (Seen between timer ticks, as `waitFor` polls.)
   */
  const idle = () => reading === 0 && waiting > 0;
  return { readAll, wakeups, append, stats, idle };
}

/** Takes pages until `total` events, pausing `delayMs` after each; `ids` shows the progress. */
async function follow(iterable: AsyncIterable<ReadAllPage>, total: number, delayMs: number, ids: string[] = []) {
  let pages = 0;
  for await (const page of iterable) {
    pages++;
    ids.push(...page.events.map((e) => e.id));
    if (ids.length >= total) break;
    await new Promise((r) => setTimeout(r, delayMs)); // applying the page
  }
  return { ids, pages };
}

describe('shared tail', () => {
  it('gives three subscribers at the head every event once, in order, from one reader', async () => {
    const log = memoryLog();
    const tails = createSharedTails(log.readAll, log.wakeups);
    const controller = new AbortController();
    const subscribe = () => tails.subscribe({ maxCount: 50, pollIntervalMs: 10_000, signal: controller.signal });
    const followers = [follow(subscribe(), 200, 2), follow(subscribe(), 200, 3), follow(subscribe(), 200, 5)];
    await waitFor(() => log.idle(), 5_000, 'all three at the (empty) head');
    const readsAtHead = log.stats.reads;
    for (let batch = 0; batch < 40; batch++) {
      log.append(5);
      // The writer's pace is the input here: a commit every 4 ms, faster than the slowest
      // subscriber applies a page, so commits land while the others wait at the head.
      await new Promise((r) => setTimeout(r, 4));
    }
    const results = await Promise.all(followers);
    controller.abort();
    const expected = Array.from({ length: 200 }, (_, i) => `e${i + 1}`);
    for (const { ids } of results) expect(ids).toEqual(expected);
    // Each subscriber reading for itself would read at least once per batch: 3 × 40 reads.
    const reads = log.stats.reads - readsAtHead;
    expect(reads).toBeLessThanOrEqual(60);
  });

  it('does not read again after a page that reached the head until something commits (atHead)', async () => {
    const run = async (reportsHead: boolean, listening = true) => {
      const log = memoryLog({ reportsHead, listening });
      const tails = createSharedTails(log.readAll, log.wakeups);
      const controller = new AbortController();
      const subscribe = () => tails.subscribe({ maxCount: 50, pollIntervalMs: 10_000, signal: controller.signal });
      const followers = [follow(subscribe(), 200, 2), follow(subscribe(), 200, 3)];
      await waitFor(() => log.idle(), 5_000, 'both at the (empty) head');
      const emptyAtHead = log.stats.emptyReads;
      for (let batch = 0; batch < 40; batch++) {
        // The subscribers keep up between commits: each commit finds both settled at the head.
        if (batch > 0) await waitFor(() => log.idle(), 5_000, `both at the head after commit ${batch}`);
        log.append(5);
      }
      const results = await Promise.all(followers);
      controller.abort();
      const expected = Array.from({ length: 200 }, (_, i) => `e${i + 1}`);
      for (const { ids } of results) expect(ids).toEqual(expected);
      return log.stats.emptyReads - emptyAtHead;
    };
    // Without the hint, a page is followed by a read that finds nothing, about once per commit.
    expect(await run(false)).toBeGreaterThanOrEqual(20);
    // With it, the tail waits for the next commit instead: a read comes back empty only when a
    // commit lands between the notification count taken before a read and that read (the read
    // takes its events, and its notification then wakes the tail once more). Here each commit
    // waits for the readers to settle, so that should not happen; the bound allows for it.
    expect(await run(true)).toBeLessThanOrEqual(2);
    // Unless no notifications arrive (no LISTEN connection): then it reads again as before.
    expect(await run(true, false)).toBeGreaterThanOrEqual(20);
  });

  it('lets a subscriber far behind read for itself, then join the others at the head', async () => {
    const log = memoryLog();
    log.append(500);
    const tails = createSharedTails(log.readAll, log.wakeups);
    const controller = new AbortController();
    const subscribe = (after?: GlobalPosition) =>
      tails.subscribe({ after, maxCount: 50, pollIntervalMs: 10_000, signal: controller.signal });
    const aheadIds: string[] = [];
    const behindIds: string[] = [];
    const ahead = follow(subscribe({ commit: 450n, prepare: 450n }), 60, 1, aheadIds);
    const behind = follow(subscribe(), 510, 1, behindIds);
    await waitFor(() => aheadIds.length === 50 && behindIds.length === 500 && log.idle(), 5_000, 'both at the head');
    log.append(10);
    const [a, b] = await Promise.all([ahead, behind]);
    controller.abort();
    expect(a.ids).toEqual(Array.from({ length: 60 }, (_, i) => `e${i + 451}`));
    expect(b.ids).toEqual(Array.from({ length: 510 }, (_, i) => `e${i + 1}`));
  });

  it('passes a failed read at the head to the subscribers waiting there, and recovers', async () => {
    const log = memoryLog();
    let failNext = false;
    const readAll = async (opts: ReadAllOptions) => {
      if (failNext) {
        failNext = false;
        throw new Error('connection lost');
      }
      return log.readAll(opts);
    };
    const tails = createSharedTails(readAll, log.wakeups);
    const controller = new AbortController();
    const seen: string[] = [];
    const failures: unknown[] = [];
    const subscriber = (async () => {
      // As the projection runner does: on an error, subscribe again from where it got to.
      let after: GlobalPosition = START;
      while (seen.length < 10) {
        try {
          for await (const page of tails.subscribe({ after, maxCount: 50, pollIntervalMs: 10_000, signal: controller.signal })) {
            seen.push(...page.events.map((e) => e.id));
            after = page.checkpoint;
            if (seen.length >= 10) break;
          }
        } catch (error) {
          failures.push(error);
        }
      }
    })();
    await waitFor(() => log.idle(), 5_000, 'the subscriber at the (empty) head');
    failNext = true;
    log.append(5);
    await waitFor(() => seen.length === 5 && log.idle(), 5_000, 'the subscriber back at the head after the failure');
    log.append(5);
    await subscriber;
    controller.abort();
    expect(failures).toHaveLength(1);
    expect(seen).toEqual(Array.from({ length: 10 }, (_, i) => `e${i + 1}`));
  });
});
