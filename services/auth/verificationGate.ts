import { availableParallelism } from 'node:os';
import { ServiceUnavailableError, TooManyRequestsError } from '../../shared/errors.ts';

/**
 * A cap on concurrent password verifications (argon2id costs ~50 ms of a core and 19 MiB each),
 * fair between clients, so junk logins cannot starve real ones. At most `concurrency` run at once; the rest wait in
 * one queue per client key (the client's IP); a freed slot goes to the waiting key with the
 * fewest verifications running (ties: the key served longest ago, i.e. round-robin), so 40 junk
 * logins from one address queue behind each other, not in front of everyone else; and one
 * address never holds every slot (`maxRunningPerKey`, default concurrency − 1), so a real login
 * from another address finds a slot free at once. Bounds, each answered at once and cheaply:
 * - a client with `maxPendingPerKey` verifications running or waiting → 429 (Retry-After: 1);
 * - `maxQueued` waiting in all → 503 (Retry-After: 1): the process is saturated;
 * - a wait longer than `maxWaitMs` → 503 (Retry-After: 1).
 *
 * Hand-written (about 60 lines) because the semaphores on npm (p-limit, async-sema, p-queue)
 * have one FIFO queue: none has per-key fairness or per-key caps, which are the point here.
 */
export type VerificationGate = {
  run<T>(key: string, work: () => Promise<T>): Promise<T>;
  /** Verifications running and waiting now (for tests and metrics). */
  load(): { readonly active: number; readonly queued: number };
};

export type VerificationGateOptions = {
  readonly concurrency?: number;
  readonly maxQueued?: number;
  readonly maxPendingPerKey?: number;
  readonly maxRunningPerKey?: number;
  readonly maxWaitMs?: number;
};

type Waiter = { readonly start: () => void };

export function createVerificationGate(options: VerificationGateOptions = {}): VerificationGate {
  const concurrency = options.concurrency ?? Math.max(1, availableParallelism());
  const maxQueued = options.maxQueued ?? 64;
  const maxPendingPerKey = options.maxPendingPerKey ?? 4;
  const maxWaitMs = options.maxWaitMs ?? 2_000;
  const maxRunningPerKey = options.maxRunningPerKey ?? Math.max(1, concurrency - 1);
  let active = 0;
  let queued = 0;
  /** Waiters per key; which key goes next is `nextKey`'s choice (fewest running, then least recently served). */
  const queues = new Map<string, Waiter[]>();
  const pending = new Map<string, number>();

  const busy = (detail: string) => new ServiceUnavailableError(detail, {}, { 'retry-after': '1' });

  const running = new Map<string, number>();
  /** When each key last got a slot (a counter); keys with nothing pending are forgotten. */
  const lastServed = new Map<string, number>();
  let serial = 0;
  const started = (key: string) => {
    active++;
    running.set(key, (running.get(key) ?? 0) + 1);
    lastServed.set(key, ++serial);
  };
  const finished = (key: string) => {
    active--;
    const left = (running.get(key) ?? 1) - 1;
    if (left > 0) running.set(key, left);
    else running.delete(key);
  };

  /** The waiting key with the fewest verifications running; among those, the one served longest ago. */
  const nextKey = (): string | undefined => {
    let best: string | undefined;
    let bestRank: readonly [number, number] = [Infinity, Infinity];
    for (const key of queues.keys()) {
      const rank = [running.get(key) ?? 0, lastServed.get(key) ?? 0] as const;
      if (rank[0] >= maxRunningPerKey) continue;
      if (rank[0] < bestRank[0] || (rank[0] === bestRank[0] && rank[1] < bestRank[1])) {
        best = key;
        bestRank = rank;
      }
    }
    return best;
  };

  const dispatch = () => {
    while (active < concurrency && queued > 0) {
      const key = nextKey();
      const waiters = key === undefined ? undefined : queues.get(key);
      if (key === undefined || !waiters) return;
      const waiter = waiters.shift();
      if (waiters.length === 0) queues.delete(key);
      if (!waiter) continue;
      queued--;
      started(key);
      waiter.start();
    }
  };

  const admit = (key: string): Promise<void> => {
    // Straight in when a slot is free to this key and nobody who could take it is waiting.
    if (active < concurrency && (running.get(key) ?? 0) < maxRunningPerKey && nextKey() === undefined) {
      started(key);
      return Promise.resolve();
    }
    if (queued >= maxQueued) return Promise.reject(busy('Too many logins at once; retry in a moment'));
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        start: () => {
          clearTimeout(timer);
          resolve();
        },
      };
      const timer = setTimeout(() => {
        const waiters = queues.get(key);
        const index = waiters?.indexOf(waiter) ?? -1;
        if (!waiters || index < 0) return; // already started
        waiters.splice(index, 1);
        if (waiters.length === 0) queues.delete(key);
        queued--;
        reject(busy('Logins are queued for longer than usual; retry in a moment'));
      }, maxWaitMs);
      const waiters = queues.get(key);
      if (waiters) waiters.push(waiter);
      else queues.set(key, [waiter]);
      queued++;
      dispatch(); // a slot may be free to this key while others wait for theirs
    });
  };

  return {
    async run(key, work) {
      const mine = pending.get(key) ?? 0;
      if (mine >= maxPendingPerKey) {
        throw new TooManyRequestsError('Too many logins at once from this address; retry in a moment', {}, { 'retry-after': '1' });
      }
      pending.set(key, mine + 1);
      try {
        await admit(key);
        try {
          return await work();
        } finally {
          finished(key);
          dispatch();
        }
      } finally {
        const left = (pending.get(key) ?? 1) - 1;
        if (left > 0) pending.set(key, left);
        else {
          pending.delete(key);
          lastServed.delete(key);
        }
      }
    },
    load: () => ({ active, queued }),
  };
}
