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
 * One LISTEN connection per process for every long-poll and the webhook dispatcher, opened on
 * first use and reopened after an error. A lost notification costs latency only: every wait
 * is bounded and followed by a read.
 */
export function createChangeWakeups(databaseUrl: string): ChangeWakeups {
  const waiters = new Map<string, Set<() => void>>();
  let closed = false;

  const wake = (tenantId: string | undefined) => {
    const targets = tenantId === undefined ? [...waiters.values()] : [waiters.get(tenantId), waiters.get('*')];
    for (const set of targets) for (const done of set ?? []) done();
  };

  const connection = createListenConnection({
    url: databaseUrl,
    channel: CHANGES_CHANNEL,
    onNotification: wake,
    onLost: () => wake(undefined),
  });

  return {
    async watch(tenantId) {
      if (!closed) await connection.open();
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
        wait(timeoutMs, signal) {
          if (fired || closed || signal?.aborted) {
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
    async close() {
      closed = true;
      wake(undefined);
      await connection.release();
    },
  };
}
