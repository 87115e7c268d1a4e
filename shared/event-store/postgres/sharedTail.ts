import { START, comparePositions, type GlobalPosition, type ReadAllOptions, type ReadAllPage, type SubscribeOptions } from '../port.ts';

/**
 * Live subscriptions of one process that follow the head of the log share one reader.
 * `projector employees` runs three projections over the same event types: without this, each
 * read every page itself and, once caught up, each polled the head on its own after every page.
 *
 * Per (event types, page size, poll interval) there is one tail: a loop that reads the log from
 * its position, keeps the last pages, and otherwise waits for a commit notification. A subscriber
 * takes the rest of a kept page that holds its position (a page guarantees every matching event
 * between its start and its checkpoint, so its rest is a valid page from any position inside
 * it); at the tail's position it waits for the tail's next page; anywhere else (behind the kept
 * pages, or on a fresh tail) it reads for itself until it reaches the head, where the tail takes
 * over. Nothing is lost or reordered: pages handed out are pages the store read, cut at the
 * subscriber's position.
 */
export type TailWakeups = {
  /** Counts notifications: read it before a read, hand it to `next` after an empty one. */
  generation(): number;
  /** Resolves on a notification since `seen`, after `timeoutMs`, or on abort. */
  next(seen: number, timeoutMs: number, signal?: AbortSignal): Promise<void>;
  /**
   * Whether commit notifications are arriving now (a LISTEN connection is open). Without them
   * the tail does not wait after a page at the head: it reads again, as after any other page.
   */
  listening?(): boolean;
};

type KeptPage = { readonly after: GlobalPosition; readonly page: ReadAllPage };

type Waiter = (error?: unknown) => void;

type Tail = {
  /** Where the tail reads next; undefined until a subscriber reaches the head. */
  position: GlobalPosition | undefined;
  /** The last pages read, oldest first. */
  kept: KeptPage[];
  subscribers: number;
  running: boolean;
  /** Subscribers waiting at the tail's position for its next page (or its failure). */
  waiters: Set<Waiter>;
  /**
   * Set when the last page reached the head (`atHead`): the notification count taken before
   * that read. Until a notification comes after it, a read would find nothing new.
   */
  headSeen: number | undefined;
  stop: AbortController;
};

const KEPT_PAGES = 32;

const progressed = (page: ReadAllPage, after: GlobalPosition) => page.events.length > 0 || comparePositions(page.checkpoint, after) > 0;

/**
 * What the kept pages hold after `after`: the rest of the page that holds it, joined with the
 * pages that follow it without a gap, up to `maxCount` events. Undefined when no page holds it.
 */
function restOf(kept: readonly KeptPage[], after: GlobalPosition, maxCount: number): ReadAllPage | undefined {
  let i = kept.length - 1;
  for (; i >= 0; i--) {
    const entry = kept[i];
    if (entry && comparePositions(entry.after, after) <= 0 && comparePositions(entry.page.checkpoint, after) > 0) break;
  }
  const first = kept[i];
  if (!first) return undefined;
  const start = first.page.events.findIndex((e) => comparePositions(e.position, after) > 0);
  let events: readonly ReadAllPage['events'][number][] = start < 0 ? [] : start === 0 ? first.page.events : first.page.events.slice(start);
  let checkpoint = first.page.checkpoint;
  for (let j = i + 1; j < kept.length; j++) {
    const next = kept[j];
    if (!next || comparePositions(next.after, checkpoint) !== 0 || events.length + next.page.events.length > maxCount) break;
    events = events.length === 0 ? next.page.events : [...events, ...next.page.events];
    checkpoint = next.page.checkpoint;
  }
  return { events: [...events], checkpoint };
}

export function createSharedTails(readAll: (opts: ReadAllOptions) => Promise<ReadAllPage>, wakeups: TailWakeups) {
  const tails = new Map<string, Tail>();

  const wake = (tail: Tail, error?: unknown) => {
    const waiters = [...tail.waiters];
    tail.waiters.clear();
    for (const waiter of waiters) waiter(error);
  };

  /**
   * The tail's reader. It reads only while a subscriber waits at its position (the others are
   * applying what they got; the runner asks for its next page while it applies, so reading and
   * applying still overlap), and waits for a commit notification when the log has nothing new.
   */
  const run = async (tail: Tail, opts: ReadAllOptions, pollIntervalMs: number) => {
    if (tail.running) return;
    tail.running = true;
    try {
      while (tail.position && tail.waiters.size > 0 && !tail.stop.signal.aborted) {
        if (tail.headSeen !== undefined) {
          // The last page reached the head: wait for a commit instead of reading nothing (under
          // load that empty read was every other read). A commit after that read
          // began notifies after it. Events that committed before it but were below an older
          // writer still open (the horizon) come with that writer's notification; if it ends
          // without one (a failed flush, another transaction locking the tables), they wait
          // for the poll interval, as after an empty read. Nothing is lost either way.
          await wakeups.next(tail.headSeen, pollIntervalMs, tail.stop.signal);
          tail.headSeen = undefined;
          continue;
        }
        const after = tail.position;
        const seen = wakeups.generation();
        let page: ReadAllPage;
        try {
          page = await readAll({ ...opts, after });
        } catch (error) {
          wake(tail, error);
          continue;
        }
        if (tail.position !== after) continue; // a subscriber moved it meanwhile: read from there
        if (progressed(page, after)) {
          tail.kept.push({ after, page });
          if (tail.kept.length > KEPT_PAGES) tail.kept.shift();
          tail.position = page.checkpoint;
          if (page.atHead && wakeups.listening?.() === true) tail.headSeen = seen;
          wake(tail);
        } else {
          await wakeups.next(seen, pollIntervalMs, tail.stop.signal);
        }
      }
    } finally {
      tail.running = false;
    }
  };

  return {
    /** `subscribeToAll` over `readAll`, sharing the reads at the head with the process's other subscribers. */
    async *subscribe(opts: SubscribeOptions): AsyncGenerator<ReadAllPage> {
      const { signal, pollIntervalMs = 250, after: from, ...readOptions } = opts;
      const maxCount = readOptions.maxCount ?? 1_000;
      const key = `${maxCount}/${pollIntervalMs}/${readOptions.eventTypes ? [...readOptions.eventTypes].sort().join(',') : '*'}`;
      let tail = tails.get(key);
      if (!tail) {
        tail = {
          position: undefined,
          kept: [],
          subscribers: 0,
          running: false,
          waiters: new Set(),
          headSeen: undefined,
          stop: new AbortController(),
        };
        tails.set(key, tail);
      }
      const mine = tail;
      mine.subscribers++;
      let after = from ?? START;
      try {
        while (!signal?.aborted) {
          const rest = restOf(mine.kept, after, maxCount);
          if (rest) {
            after = rest.checkpoint;
            yield rest;
            continue;
          }
          if (mine.position && comparePositions(mine.position, after) === 0) {
            // At the head with the tail: wait for its next page (or its failure).
            const failure = await new Promise<{ error: unknown } | undefined>((resolve) => {
              const done: Waiter = (error) => {
                signal?.removeEventListener('abort', onAbort);
                resolve(error === undefined ? undefined : { error });
              };
              const onAbort = () => {
                mine.waiters.delete(done);
                resolve(undefined);
              };
              mine.waiters.add(done);
              signal?.addEventListener('abort', onAbort, { once: true });
              void run(mine, readOptions, pollIntervalMs);
            });
            if (failure) throw failure.error;
            continue;
          }
          // Behind the kept pages, or the tail is not here: read for ourselves.
          const seen = wakeups.generation();
          const page = await readAll({ ...readOptions, after });
          if (progressed(page, after)) {
            after = page.checkpoint;
            yield page;
            continue;
          }
          // At the head: the tail reads from here on, unless it is already further.
          if (!mine.position || comparePositions(mine.position, after) < 0) {
            mine.position = after;
            continue;
          }
          await wakeups.next(seen, pollIntervalMs, signal);
        }
      } finally {
        mine.subscribers--;
        if (mine.subscribers === 0) {
          tails.delete(key);
          mine.stop.abort();
          wake(mine);
        }
      }
    },
  };
}
