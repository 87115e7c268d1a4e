import { createListenConnection } from '../../db/listen.ts';

/** The channel that wakes live readers, and the statement that sends a wake-up on its own. */
export const NOTIFY_CHANNEL = 'es_events';
export const NOTIFY_STATEMENT = `select pg_notify('${NOTIFY_CHANNEL}', '')`;

export type Wakeups = ReturnType<typeof createWakeups>;

/**
 * One LISTEN connection per store, shared by all live subscriptions. Notifications only cut a
 * wait short; every wait is bounded, so a lost connection costs latency, never events.
 */
export function createWakeups(listenUrl: string | undefined) {
  let users = 0;
  let closed = false;
  const waiters = new Set<() => void>();
  let notifications = 0;

  const wakeAll = () => {
    notifications++;
    for (const wake of waiters) wake();
    waiters.clear();
  };
  // A lost connection wakes every waiter too: what was notified meanwhile is unknown, so re-read.
  const listen = listenUrl
    ? createListenConnection({ url: listenUrl, channel: NOTIFY_CHANNEL, onNotification: wakeAll, onLost: wakeAll })
    : undefined;
  const connect = () => (listen && !closed ? listen.open() : Promise.resolve(false));

  return {
    async subscribe() {
      users++;
      await connect();
      return () => {
        users--;
        if (users === 0) void listen?.release();
      };
    },
    /** Counts notifications: read it before a read, hand it to `next` after an empty one. */
    generation: () => notifications,
    listening: () => listen?.listening === true,
    /**
     * Resolves at once if a notification came since `seen`, else on the next one, after
     * `timeoutMs`, or on abort, whichever is first.
     */
    next(seen: number, timeoutMs: number, signal?: AbortSignal): Promise<void> {
      if (notifications !== seen || signal?.aborted) return Promise.resolve();
      if (users > 0 && !listen?.listening) void connect();
      return new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', done);
          waiters.delete(done);
          resolve();
        };
        const timer = setTimeout(done, timeoutMs);
        signal?.addEventListener('abort', done, { once: true });
        waiters.add(done);
      });
    },
    async close() {
      closed = true;
      wakeAll();
      await listen?.release();
    },
  };
}
