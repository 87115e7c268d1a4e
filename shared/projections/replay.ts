import { AsyncResource } from 'node:async_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { connectionUrlOf, ignoredRows, sql, type DatabasePool, type Queryable } from '../db/pool.ts';
import {
  START,
  comparePositions,
  type EventStore,
  type GlobalPosition,
  type ReadAllPage,
  type RecordedEvent,
} from '../event-store/port.ts';
import { readCheckpoint } from './checkpoints.ts';
import type { IsolationPolicy } from './isolation.ts';
import { replayLockKey } from './parking.ts';
import type { Projection } from './projection.ts';
import { buildAndSwap, type ProgressListener, type ReplayResult } from './rebuild.ts';
import { dropAbandonedShadows, shadowTablesOf } from './shadowTables.ts';
import { assertNotSuperseded } from './versionGuard.ts';

const lockedRow = z.object({ locked: z.boolean() });

/**
 * Rebuilds a projection from the first event into shadow tables, then swaps them in atomically.
 * Readers keep using the live tables until the swap; the swap holds the live checkpoint row so
 * the live projector cannot commit in between, applies the last events, renames, and moves
 * the checkpoint — all in one transaction. The log is applied in the live model's order
 * (applyOrder.ts): events `projections retry` applied late go at the same point again, and
 * events parked in the live model (and the later events of their streams) go last, in the swap.
 *
 * A projection with a `bulk` path is rebuilt as a bulk load: the log up to its current head is
 * read in large pages (the store's `readAllBulk` when it has one) and folded in memory, the rows
 * are written in one transaction with multi-row inserts, and only then are the primary keys and
 * indexes built. The events that commit meanwhile are applied with `handle` before the swap.
 */
export async function replayProjection<T extends string>(
  pool: DatabasePool,
  store: EventStore,
  projection: Projection<T>,
  options: {
    batchSize?: number;
    onProgress?: ProgressListener;
    signal?: AbortSignal;
    /** Replace a model built by a NEWER version (an explicit operator rollback). Default: refuse. */
    allowDowngrade?: boolean;
    /** Retries of a failing event before it is parked (as for the live projector). */
    isolation?: Partial<Pick<IsolationPolicy, 'maxAttempts' | 'backoffMs'>>;
    /** Called for each event the replay parked, once its page has committed. */
    onParked?: (event: RecordedEvent, error: string) => void;
    /**
     * Build only if the stored version is not this code's (a projector's start-up). Checked
     * under the replay lock: of several projectors started on a version bump, one builds and
     * the others find it built, instead of each rebuilding in turn.
     */
    onlyIfOutdated?: boolean;
  } = {},
): Promise<ReplayResult> {
  // The store reads on its own connections. Bound here, outside the connection's async context,
  // so slonik does not take the store's pool queries for a foreign connection inside it.
  const batchSize = options.batchSize ?? 2_000;
  const readPage = AsyncResource.bind((after: GlobalPosition) =>
    store.readAll({ after, maxCount: batchSize, eventTypes: projection.eventTypes }),
  );
  const readHead = AsyncResource.bind(() => store.headPosition());
  const bulkRead = store.readAllBulk?.bind(store);
  const readBulk = bulkRead
    ? () => bindIterable(bulkRead({ eventTypes: projection.eventTypes, signal: options.signal }))
    : () => pagesOf(readPage);
  // One replay per projection at a time, held for the whole build on one connection; it also
  // makes it safe to drop shadow tables that a killed replay left behind.
  return pool.connect(async (connection) => {
    // Polled, not waited for inside pg_advisory_lock: behind another copy's build (a version bump
    // on several projectors) that wait would outlast the pool's statement timeout.
    while (!(await tryReplayLock(connection, projection))) {
      if (options.signal?.aborted) throw new Error('replay aborted');
      await sleep(REPLAY_LOCK_POLL_MS, undefined, { signal: options.signal }).catch(() => undefined);
    }
    try {
      const stored = await readCheckpoint(connection, projection.name);
      if (!options.allowDowngrade) assertNotSuperseded(stored, projection);
      if (options.onlyIfOutdated && stored?.version === projection.version) return { processed: 0, parked: 0, position: stored.position };
      await dropAbandonedShadows(connection, projection);
      return await buildAndSwap(connection, { readPage, readHead, readBulk }, projection, {
        ...options,
        connectionUrl: connectionUrlOf(pool),
      });
    } finally {
      await releaseReplayLock(connection, projection);
    }
  });
}

const REPLAY_LOCK_POLL_MS = 200;

/** Takes the projection's replay lock (a session lock of `connection`) if free. */
const tryReplayLock = (connection: Queryable, projection: Projection<string>): Promise<boolean> =>
  connection.oneFirst(sql.type(lockedRow)`select pg_try_advisory_lock(hashtext(${replayLockKey(projection.name)})) as locked`);

async function releaseReplayLock(connection: Queryable, projection: Projection<string>): Promise<void> {
  await connection.query(sql.type(ignoredRows)`select pg_advisory_unlock(hashtext(${replayLockKey(projection.name)}))`);
}

/**
 * Drops the shadow tables a killed replay left behind, unless a replay is building now ('busy':
 * its tables are its own). Left alone until the next replay, they would keep what they copied, the
 * personal data of people erased since included. A table some reader holds (a `pg_dump` running)
 * is not waited for: the lock wait ends after a second with an error, and the caller tries again
 * later.
 */
export async function clearAbandonedBuild(pool: DatabasePool, projection: Projection<string>): Promise<'cleared' | 'busy'> {
  // Nothing there, nothing to lock: a projector looks now and then, and its lock would make a
  // `projections retry` or `resolve` meanwhile take it for a rebuild running.
  if ((await shadowTablesOf(pool, projection)).length === 0) return 'cleared';
  return pool.connect(async (connection) => {
    if (!(await tryReplayLock(connection, projection))) return 'busy';
    try {
      await connection.transaction(async (tx) => {
        await tx.query(sql.type(ignoredRows)`set local lock_timeout = '1s'`);
        await dropAbandonedShadows(tx, projection);
      });
      return 'cleared';
    } finally {
      await releaseReplayLock(connection, projection);
    }
  });
}

/** Each `next()` of the store's iterator runs outside the replay connection's async context (see above). */
function bindIterable<P>(iterable: AsyncIterable<P>): AsyncIterable<P> {
  const iterator = iterable[Symbol.asyncIterator]();
  const next = AsyncResource.bind(() => iterator.next());
  const close = AsyncResource.bind(async () => void (await iterator.return?.()));
  return {
    [Symbol.asyncIterator]: () => ({ next, return: async () => (await close(), { done: true, value: undefined }) }),
  };
}

/** Pages of `readAll` from the first event until the checkpoint stops moving; reads the next page while the caller works. */
async function* pagesOf(readPage: (after: GlobalPosition) => Promise<ReadAllPage>): AsyncGenerator<ReadAllPage> {
  let position = START;
  let page = await readPage(position);
  while (comparePositions(page.checkpoint, position) !== 0) {
    const current = page;
    const next = readPage(current.checkpoint);
    next.catch(() => undefined); // awaited below; this only keeps a failure of an abandoned read quiet
    yield current;
    position = current.checkpoint;
    page = await next;
  }
}
