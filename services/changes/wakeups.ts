import { createListenConnection } from '../../shared/db/listen.ts';
import { CHANGES_CHANNEL } from '../../projections/changes/changesProjection.ts';

export type ChangeWatch = {
  /**
   * Resolves at once if a change for the tenant was committed since `watch()` was called,
   * else on the next one, on abort, or after `timeoutMs`. Callers re-read after it resolves:
   * a wake-up is a hint, never data.
   */
  wait(timeoutMs: number, signal?: AbortSignal): Promise<void>;
  /** Stops watching (always call it). */
  cancel(): void;
};

export type ChangeWakeups = {
  /** Starts watching `tenantId` (`'*'`: every tenant). Call it BEFORE the read it guards. */
  watch(tenantId: string): Promise<ChangeWatch>;
  close(): Promise<void>;
};

/**
 * One LISTEN connection per process and database for every long-poll and the webhook dispatcher
 * (`all` runs both): every `createChangeWakeups` on the same URL shares it, opened on first use,
 * reopened after it is lost while anyone uses it, released when its last user closes. A lost
 * notification costs latency only: every wait is bounded and followed by a read.
 */
export function createChangeWakeups(databaseUrl: string): ChangeWakeups {
  let hub = hubs.get(databaseUrl);
  if (!hub) {
    hub = createHub(databaseUrl);
    hubs.set(databaseUrl, hub);
  }
  const shared = hub;
  shared.users++;
  let closed = false;
  // This user's watches: closing it ends their waits (the other users' go on).
  const mine = new Set<() => void>();
  return {
    async watch(tenantId) {
      if (!closed) await shared.connection.open();
      const watch = shared.watch(tenantId, () => closed);
      const wake = () => watch.wake();
      mine.add(wake);
      return {
        wait: watch.wait,
        cancel() {
          mine.delete(wake);
          watch.cancel();
        },
      };
    },
    async close() {
      if (closed) return;
      closed = true;
      for (const wake of mine) wake();
      shared.users--;
      if (shared.users === 0) {
        hubs.delete(databaseUrl);
        shared.stopReopening();
        await shared.connection.release();
      }
    },
  };
}

type Hub = ReturnType<typeof createHub>;
const hubs = new Map<string, Hub>();

/** Waits between attempts to listen again after a loss: soon at first, then no busier than the sweep. */
const REOPEN_DELAYS_MS = [0, 100, 250, 500, 1_000, 2_000];

function createHub(databaseUrl: string) {
  const waiters = new Map<string, Set<() => void>>();

  const wake = (tenantId: string | undefined) => {
    const targets = tenantId === undefined ? [...waiters.values()] : [waiters.get(tenantId), waiters.get('*')];
    for (const set of targets) for (const done of set ?? []) done();
  };

  // A waiter that holds one watch for its whole life (the webhook dispatcher) never calls
  // `watch()` again, so the hub itself reopens a lost connection while it has users: otherwise
  // after a restart or fail-over every wake-up would wait for the bounded timeout.
  let reopenTimer: NodeJS.Timeout | undefined;
  let stopped = false;
  const reopen = (attempt: number) => {
    const delay = REOPEN_DELAYS_MS[Math.min(attempt, REOPEN_DELAYS_MS.length - 1)];
    reopenTimer = setTimeout(() => {
      reopenTimer = undefined;
      if (stopped) return;
      // Someone's `watch()` may have reopened it first; the waiters still re-read.
      if (connection.listening) return wake(undefined);
      void connection.open().then((listening) => {
        if (stopped) return;
        // What was committed while nobody listened sent no wake-up: every waiter re-reads.
        if (listening) wake(undefined);
        else reopen(attempt + 1);
      });
    }, delay);
    reopenTimer.unref();
  };

  const connection = createListenConnection({
    url: databaseUrl,
    channel: CHANGES_CHANNEL,
    onNotification: wake,
    onLost: () => {
      wake(undefined);
      if (!stopped && !reopenTimer) reopen(0);
    },
  });

  return {
    connection,
    users: 0,
    stopReopening() {
      stopped = true;
      clearTimeout(reopenTimer);
    },
    /** A watch on `tenantId`; `isClosed` is its user's state (a closed user's waits end at once). */
    watch(tenantId: string, isClosed: () => boolean): ChangeWatch & { wake(): void } {
      let fired = false;
      let resolveWait: (() => void) | undefined;
      const set = waiters.get(tenantId) ?? new Set<() => void>();
      waiters.set(tenantId, set);
      const onWake = () => {
        fired = true;
        resolveWait?.();
      };
      set.add(onWake);
      const cancel = () => {
        set.delete(onWake);
        if (set.size === 0 && waiters.get(tenantId) === set) waiters.delete(tenantId);
        resolveWait?.();
      };
      return {
        cancel,
        wake: onWake,
        wait(timeoutMs, signal) {
          if (fired || isClosed() || signal?.aborted) {
            fired = false;
            return Promise.resolve();
          }
          return new Promise<void>((resolve) => {
            const done = () => {
              clearTimeout(timer);
              signal?.removeEventListener('abort', done);
              resolveWait = undefined;
              fired = false;
              resolve();
            };
            resolveWait = done;
            const timer = setTimeout(done, timeoutMs);
            signal?.addEventListener('abort', done, { once: true });
          });
        },
      };
    },
  };
}
