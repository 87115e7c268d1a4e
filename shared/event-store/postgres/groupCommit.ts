import { sqlStateOf } from '../../db/sqlState.ts';
import type { AppendRequest, AppendResult } from '../port.ts';

/** An append request waiting in the group commit's queue. */
export type QueuedAppend = {
  readonly parts: readonly AppendRequest[];
  readonly events: number;
  resolve(results: AppendResult[]): void;
  reject(error: unknown): void;
};

/**
 * Group commit (what KurrentDB's single writer does with its flush): append requests queue
 * while a flush is in flight; the next flush takes everything queued (up to `maxBatchEvents`)
 * in one round trip and one transaction, so one fsync carries many commands. A lone request
 * flushes at once: there is no timer, batching comes only from concurrency.
 *
 * Outcomes stay per request (the database function decides each one separately). If the whole
 * statement fails with an SQL error (e.g. two requests racing another process with the same
 * new event id), the batch is retried one request per transaction so that only the guilty
 * request fails. A lost connection is not retried: whether that transaction committed is
 * unknown, and each caller's own retry with the same event ids is idempotent.
 */
export function createGroupCommit(
  flush: (requests: readonly QueuedAppend[], lane: number) => Promise<void>,
  options: { readonly maxBatchEvents: number; readonly maxConcurrentFlushes: number },
) {
  const queue: QueuedAppend[] = [];
  /** Flush lanes not in use (each flush in flight has its own connection). */
  const freeLanes = Array.from({ length: options.maxConcurrentFlushes }, (_, i) => i);
  const idleNow = () => freeLanes.length === options.maxConcurrentFlushes && queue.length === 0;
  let idle: Promise<void> | undefined;
  let settleIdle: (() => void) | undefined;

  const take = (): QueuedAppend[] => {
    const batch: QueuedAppend[] = [];
    let events = 0;
    while (queue.length > 0) {
      const next = queue[0];
      if (!next || (batch.length > 0 && events + next.events > options.maxBatchEvents)) break;
      batch.push(next);
      events += next.events;
      queue.shift();
    }
    return batch;
  };

  const run = async (batch: readonly QueuedAppend[], lane: number): Promise<void> => {
    try {
      await flush(batch, lane);
    } catch (error) {
      const state = sqlStateOf(error);
      const isolatable = batch.length > 1 && state !== undefined && !state.startsWith('08') && !state.startsWith('57');
      if (!isolatable) {
        for (const request of batch) request.reject(error);
        return;
      }
      for (const request of batch) await run([request], lane);
    }
  };

  const loop = async () => {
    const lane = freeLanes.pop();
    if (lane === undefined) return;
    try {
      for (let batch = take(); batch.length > 0; batch = take()) {
        await run(batch, lane);
        // One turn of the event loop (not a timer): the callers just answered usually append
        // again at once; let their next requests join the next flush instead of trailing it.
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    } finally {
      freeLanes.push(lane);
      if (idleNow()) {
        settleIdle?.();
        idle = undefined;
        settleIdle = undefined;
      }
    }
  };

  return {
    submit(parts: readonly AppendRequest[]): Promise<AppendResult[]> {
      return new Promise<AppendResult[]>((resolve, reject) => {
        queue.push({ parts, events: parts.reduce((n, p) => n + p.events.length, 0), resolve, reject });
        if (freeLanes.length > 0) void loop();
      });
    },
    /** Resolves once nothing is queued or in flight. */
    drained(): Promise<void> {
      if (idleNow()) return Promise.resolve();
      idle ??= new Promise<void>((resolve) => (settleIdle = resolve));
      return idle;
    },
  };
}
