import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import type { SealedDataKey } from './dataKeys.ts';
import type { KeyEncryptionKeys } from './keyEncryptionKeys.ts';

/**
 * Sealed values opened on worker threads, for rebuilds: a rebuild's thread reads and folds while
 * the workers open the pages ahead (unwrapping each subject's data key, then deciphering its
 * values), one thread per core (at most three) by default, since deciphering is most of a sealed rebuild's CPU:
 * each `node:crypto` call costs microseconds of fixed overhead, and a rebuild makes several per
 * event. Live reads open in-thread: their pages are small, and a round trip would cost more.
 */
export type OpenJob = {
  /** The data keys, still sealed (as `DataKeyStore.loadSealed` reads them). */
  readonly keys: readonly SealedDataKey[];
  /** Per value: the index of its key in `keys`, the sealed value, and its place (fieldPlace). */
  readonly keyOf: readonly number[];
  readonly values: readonly string[];
  readonly places: readonly string[];
};

export type BulkOpener = {
  /** The values opened, in the job's order; fails as opening in-thread would (a value altered or moved, a KEK missing). */
  open(job: OpenJob): Promise<string[]>;
  close(): Promise<void>;
};

/** A bulk read has at most three pages being opened at once (sealing.ts): more threads would idle. */
const MOST_THREADS = 3;

type Reply = { readonly id: number; readonly opened?: string[]; readonly error?: string };

export function startBulkOpener(keks: KeyEncryptionKeys, threads = Math.min(availableParallelism(), MOST_THREADS)): BulkOpener {
  const workers = Array.from(
    { length: Math.max(1, threads) },
    () => new Worker(new URL('./bulkOpenerWorker.ts', import.meta.url), { workerData: { keks: keks.all } }),
  );
  let turn = 0;
  // A rebuild that ends without closing (its process exits) is not held up by the threads.
  for (const worker of workers) worker.unref();
  const pending = new Map<number, { resolve(values: string[]): void; reject(error: Error): void }>();
  let nextId = 0;
  let failed: Error | undefined;
  const failAll = (error: Error) => {
    failed = error;
    for (const waiting of pending.values()) waiting.reject(error);
    pending.clear();
  };
  for (const worker of workers) {
    worker.on('message', (reply: Reply) => {
      const waiting = pending.get(reply.id);
      pending.delete(reply.id);
      if (reply.opened) waiting?.resolve(reply.opened);
      else waiting?.reject(new Error(reply.error ?? 'the opening thread answered nothing'));
    });
    worker.on('error', failAll);
    worker.on('exit', (code) => failAll(new Error(`an opening thread exited (${code})`)));
  }
  return {
    open(job) {
      if (failed) return Promise.reject(failed);
      const id = nextId++;
      return new Promise<string[]>((resolve, reject) => {
        pending.set(id, { resolve, reject });
        workers[turn++ % workers.length]?.postMessage({ id, ...job });
      });
    },
    async close() {
      await Promise.all(workers.map((worker) => worker.terminate()));
    },
  };
}
