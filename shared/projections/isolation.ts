import type { IdentifierSqlToken } from 'slonik';
import type { DatabaseTransactionConnection } from '../db/pool.ts';
import type { RecordedEvent } from '../event-store/port.ts';
import { classifyFailure, describeFailure } from './failures.ts';
import { parkEvent } from './parking.ts';
import type { Projection } from './projection.ts';

export type IsolationPolicy = {
  /** Times a failing event is tried on its own before it is parked (the first try included). */
  readonly maxAttempts: number;
  /** Backoff before the second try; doubles for each further one. */
  readonly backoffMs: number;
  readonly signal?: AbortSignal;
  readonly onParked?: (event: RecordedEvent, error: string) => void;
};

export const DEFAULT_ISOLATION: IsolationPolicy = { maxAttempts: 3, backoffMs: 20 };

/** The policy for a run: the caller's retry settings over the defaults, with its signal and parking callback. */
export const isolationPolicy = (
  settings: Partial<Pick<IsolationPolicy, 'maxAttempts' | 'backoffMs'>> | undefined,
  signal: AbortSignal | undefined,
  onParked?: IsolationPolicy['onParked'],
): IsolationPolicy => ({
  maxAttempts: settings?.maxAttempts ?? DEFAULT_ISOLATION.maxAttempts,
  backoffMs: settings?.backoffMs ?? DEFAULT_ISOLATION.backoffMs,
  signal,
  onParked,
});

export type ApplyOutcome = { readonly applied: number; readonly parked: number };

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(new Error('aborted'));
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(new Error('aborted'));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });

/**
 * Applies a page inside the caller's transaction, parking what cannot be applied.
 *
 * - Events of a stream in `blocked` (stream id → the parked event it waits behind) are parked
 *   without being tried: a stream's events are never applied out of order.
 * - `isolate: false` (the fast path): the handler gets the whole page at once; any failure
 *   propagates and the caller retries the page with `isolate: true` in a fresh transaction.
 * - `isolate: true`: the page is applied inside a savepoint; when it fails it is split in two
 *   and each half applied the same way (bisection: a page of n events with one poison event
 *   costs about 2·log2(n) savepoints, not n), down to single events. A single event that fails
 *   deterministically is tried again with backoff up to `maxAttempts` times, then parked and
 *   its stream blocked. A transient failure (see failures.ts) is thrown: the page is retried
 *   as a whole, nothing is parked because the database hiccupped.
 *
 * `blocked` is updated in place with the streams parked here.
 */
export async function applyWithParking<T extends string>(
  tx: DatabaseTransactionConnection,
  projection: Projection<T>,
  events: readonly RecordedEvent[],
  tables: Readonly<Record<T, IdentifierSqlToken>>,
  options: { readonly isolate: boolean; readonly blocked: Map<string, string>; readonly policy?: IsolationPolicy },
): Promise<ApplyOutcome> {
  const policy = options.policy ?? DEFAULT_ISOLATION;
  const { blocked } = options;
  let applied = 0;
  let parked = 0;

  const park = async (event: RecordedEvent, error: string, attempts: number) => {
    await parkEvent(tx, projection, event, { error, attempts });
    if (!blocked.has(event.streamId)) blocked.set(event.streamId, event.id);
    parked++;
    policy.onParked?.(event, error);
  };

  const poison = async (event: RecordedEvent, firstError: unknown) => {
    let lastError = firstError;
    let attempts = 1;
    while (attempts < policy.maxAttempts) {
      await sleep(policy.backoffMs * 2 ** (attempts - 1), policy.signal);
      attempts++;
      try {
        await tx.transaction((savepoint) => projection.handle(savepoint, [event], tables));
        applied++;
        return;
      } catch (error) {
        if (classifyFailure(error) === 'transient') throw error;
        lastError = error;
      }
    }
    await park(event, describeFailure(lastError), attempts);
  };

  const applyRange = async (range: readonly RecordedEvent[], knownToFail = false): Promise<void> => {
    const runnable: RecordedEvent[] = [];
    for (const event of range) {
      const blocker = blocked.get(event.streamId);
      if (blocker !== undefined) await park(event, `waiting behind parked event ${blocker} of the same stream`, 0);
      else runnable.push(event);
    }
    if (runnable.length === 0) return;
    if (!options.isolate) {
      await projection.handle(tx, runnable, tables);
      applied += runnable.length;
      return;
    }
    // The whole page already failed once (the fast path): no need to try it again before splitting.
    if (!(knownToFail && runnable.length > 1)) {
      try {
        await tx.transaction((savepoint) => projection.handle(savepoint, runnable, tables));
        applied += runnable.length;
        return;
      } catch (error) {
        if (classifyFailure(error) === 'transient') throw error;
        const [only] = runnable;
        if (runnable.length === 1 && only) return poison(only, error);
      }
    }
    const middle = Math.ceil(runnable.length / 2);
    await applyRange(runnable.slice(0, middle));
    await applyRange(runnable.slice(middle));
  };

  await applyRange(events, options.isolate);
  return { applied, parked };
}
