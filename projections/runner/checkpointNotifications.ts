import { createListenConnection } from '../../shared/db/listen.ts';
import type { DatabasePool } from '../../shared/db/pool.ts';
import { comparePositions, parsePosition, type GlobalPosition } from '../../shared/event-store/port.ts';

/**
 * Checkpoint commits, pushed: a trigger on projection_checkpoints NOTIFYs `<name> <position>`
 * when a checkpoint row is written, i.e. at the commit of the transaction that applied the
 * page (live page, retry, replay swap: every writer, in every process). Read-your-writes
 * waiters listen on ONE connection per process (per pool) instead of each polling the table.
 *
 * The NOTIFY is inside the projector's transaction (PostgreSQL sends it at commit, never for a
 * rolled-back page). That costs the commit the notification queue's lock, which is why the
 * event store moved its NOTIFY out of appends; here it is one per applied page, not per write.
 */
export const CHECKPOINT_CHANNEL = 'projection_checkpoints';

type Waiter = { readonly name: string; readonly position: GlobalPosition; readonly wake: (reached: boolean) => void };

/** How long the LISTEN connection stays open with nobody waiting. */
const LINGER_MS = 30_000;

export type CheckpointListener = {
  /** The highest position a notification announced for `name` (a lower bound of its checkpoint). */
  latest(name: string): GlobalPosition | undefined;
  /** Registers a waiter; returns its removal. `wake` fires on a notification at or past `position`, or on reconnect. */
  watch(name: string, position: GlobalPosition, wake: (reached: boolean) => void): () => void;
  /** Resolves once the LISTEN is in place (true) or the connection failed (false: callers poll). */
  ready(): Promise<boolean>;
  close(): Promise<void>;
};

export function createCheckpointListener(url: string): CheckpointListener {
  const latest = new Map<string, GlobalPosition>();
  const waiters = new Set<Waiter>();
  let lingerTimer: NodeJS.Timeout | undefined;
  let closed = false;

  const onNotification = (payload: string | undefined) => {
    const [name, text] = (payload ?? '').split(' ');
    const position = text ? parsePosition(text) : undefined;
    if (!name || !position) return;
    const known = latest.get(name);
    if (!known || comparePositions(position, known) > 0) latest.set(name, position);
    for (const waiter of waiters) {
      if (waiter.name === name && comparePositions(position, waiter.position) >= 0) waiter.wake(true);
    }
  };

  const connection = createListenConnection({
    url,
    channel: CHECKPOINT_CHANNEL,
    onNotification,
    unref: true,
    onLost: () => {
      // What arrived while we were not listening is unknown: forget it and let waiters re-read.
      latest.clear();
      for (const waiter of waiters) waiter.wake(false);
    },
  });

  const scheduleLinger = () => {
    if (lingerTimer) clearTimeout(lingerTimer);
    lingerTimer = setTimeout(() => {
      lingerTimer = undefined;
      if (waiters.size > 0 || !connection.listening) return;
      latest.clear();
      void connection.release();
    }, LINGER_MS);
    lingerTimer.unref();
  };

  return {
    latest: (name) => (connection.listening ? latest.get(name) : undefined),
    watch(name, position, wake) {
      const waiter = { name, position, wake };
      waiters.add(waiter);
      return () => {
        waiters.delete(waiter);
        if (waiters.size === 0) scheduleLinger();
      };
    },
    ready: () => (closed ? Promise.resolve(false) : connection.open()),
    async close() {
      closed = true;
      if (lingerTimer) clearTimeout(lingerTimer);
      await connection.release();
    },
  };
}

const listeners = new WeakMap<DatabasePool, CheckpointListener>();

/** The process's listener for the database behind `pool` (created on first use). */
export function checkpointListenerFor(pool: DatabasePool): CheckpointListener {
  let listener = listeners.get(pool);
  if (!listener) {
    listener = createCheckpointListener(pool.configuration.connectionUri);
    listeners.set(pool, listener);
  }
  return listener;
}
