import type { DatabasePool } from '../db/pool.ts';
import { comparePositions, type GlobalPosition } from '../event-store/port.ts';
import { checkpointListenerFor } from './checkpointNotifications.ts';
import { readCheckpoint } from './checkpoints.ts';

/**
 * Read-your-writes: waits until the projection's checkpoint has reached `position`, or the
 * timeout passes. Returns whether it was reached. Works for a gateway in another process than
 * the projector: checkpoint commits are NOTIFYed (checkpointNotifications.ts) and every waiter
 * of the process shares one LISTEN connection; a waiter reads the checkpoint table once, then
 * only on a notification that reaches its position (or a reconnect). If the LISTEN connection
 * cannot be had, it falls back to polling every `fallbackPollMs`.
 */
export async function waitForCheckpoint(
  pool: DatabasePool,
  name: string,
  position: GlobalPosition,
  timeoutMs: number,
  fallbackPollMs = 250,
): Promise<boolean> {
  const listener = checkpointListenerFor(pool);
  let listening = await listener.ready();
  const announced = listening ? listener.latest(name) : undefined;
  if (announced && comparePositions(announced, position) >= 0) return true;
  const deadline = Date.now() + timeoutMs;
  let signalled: 'reached' | 'reconnected' | undefined;
  let wake: (() => void) | undefined;
  // Registered before the read: a commit between the read and the wait still wakes us.
  const unwatch = listener.watch(name, position, (reached) => {
    signalled = reached ? 'reached' : 'reconnected';
    wake?.();
  });
  try {
    for (;;) {
      signalled = undefined;
      const checkpoint = await readCheckpoint(pool, name);
      if (checkpoint && comparePositions(checkpoint.position, position) >= 0) return true;
      for (;;) {
        if (signalled === 'reached') return true; // notified after the commit that reached it
        const left = deadline - Date.now();
        if (left <= 0) return false;
        if (signalled === 'reconnected') break; // notifications may have been missed: read again
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, listening ? left : Math.min(left, fallbackPollMs));
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wake = undefined;
        if (!listening) break;
      }
      listening = await listener.ready();
    }
  } finally {
    unwatch();
  }
}
