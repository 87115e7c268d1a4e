import { setTimeout as sleep } from 'node:timers/promises';
import type { z } from 'zod';
import { connectionUrlOf, ignoredRows, sql, type DatabasePool } from '../db/pool.ts';
import { comparePositions, type EventStore, type GlobalPosition, type RecordedEvent } from '../event-store/port.ts';
import { checkpointRow, readCheckpoint, toCheckpoint, type Checkpoint } from './checkpoints.ts';
import { pageCommitMode } from './commitMode.ts';
import { classifyFailure } from './failures.ts';
import { applyWithParking, isolationPolicy, type IsolationPolicy } from './isolation.ts';
import { createPagePipeline } from './pagePipeline.ts';
import { hasParkedEvents, parkedStreams } from './parking.ts';
import type { Projection } from './projection.ts';
import { clearAbandonedBuild, replayProjection } from './replay.ts';
import { tableIds } from './shadowTables.ts';
import { ProjectionSupersededError, assertNotSuperseded } from './versionGuard.ts';

/** Why a projector stopped: asked to (`stop()`), or a newer version owns the model (version guard). */
export type ProjectorStopReason = 'stopped' | 'superseded';

export type ProjectorHandle = {
  /** Resolves when the projector has stopped (after finishing the batch in hand). */
  stop(): Promise<void>;
  /** Resolves with why it stopped: `superseded` when a newer version of the projection owns the model. */
  readonly done: Promise<ProjectorStopReason>;
};

export type RunProjectionOptions = {
  readonly batchSize?: number;
  readonly pollIntervalMs?: number;
  readonly onBatch?: (checkpoint: Checkpoint) => void;
  readonly onError?: (error: unknown) => void;
  /** Called for each event parked (after its bounded retries), with the error that parked it. */
  readonly onParked?: (event: RecordedEvent, error: string) => void;
  /** Retries of a failing event before it is parked, and their backoff (defaults: 3 tries, 20 ms doubling). */
  readonly isolation?: Partial<Pick<IsolationPolicy, 'maxAttempts' | 'backoffMs'>>;
  /** How often a running projector looks again for a killed replay's tables (default a minute). */
  readonly abandonedBuildCheckMs?: number;
};

/** Backoff after a transient failure (database down, deadlock): doubles from 50 ms up to 2 s. */
const TRANSIENT_BACKOFF_MS = { first: 50, max: 2_000 };
// A killed build's cleanup waits on a replay or on a reader of its tables (a dump: minutes), so it
// starts soon and then backs off to a few tries an hour.
const CLEAR_RETRY_MS = { first: 1_000, max: 300_000 };
const ABANDONED_BUILD_CHECK_MS = 60_000;

/**
 * The next page is requested while the current one is applied (read and apply pipelined): the
 * subscription has already moved its cursor past a page it yielded, so reading ahead never
 * skips or repeats an event. Under load a page holds whatever committed meanwhile (up to the
 * batch size): the projector batches by itself.
 */
async function* readAhead<T>(source: AsyncIterable<T>, cancel: () => void): AsyncGenerator<T> {
  const iterator = source[Symbol.asyncIterator]();
  let next = iterator.next();
  try {
    for (;;) {
      const current = await next;
      if (current.done) return;
      next = iterator.next();
      next.catch(() => undefined); // awaited on the next turn; only keeps an abandoned read quiet
      yield current.value;
    }
  } finally {
    // The read ahead may be a long poll waiting for the next commit, and an async generator's
    // `return()` queues behind its pending `next()`: without `cancel` (which aborts the
    // subscription), leaving the loop on an error, e.g. a transient failure to retry, waited
    // here until another event was appended, and the projector stalled that long.
    cancel();
    await iterator.return?.();
  }
}

/**
 * Keeps one projection live: (re)builds it when it is missing or its version is older, then
 * follows the log. Each page's writes and its checkpoint commit in one transaction; the
 * checkpoint update is a compare-and-set, so a second projector instance that raced this one
 * rolls back instead of applying a page twice.
 *
 * Poison events never stop it: a page that fails deterministically is applied again with the
 * failing events isolated (see isolation.ts), retried a bounded number of times, then parked in
 * projection_parked_events and skipped; the checkpoint moves on. Transient failures (database
 * down, deadlock, serialization) retry the page with backoff instead; nothing is parked for them.
 *
 * Version guard: when the stored model was built by a NEWER version (a rolling deploy has
 * started the next release), this projector does not rebuild; it reports a
 * ProjectionSupersededError through `onError` and stops (`done` resolves to 'superseded').
 */
export function runProjection<T extends string>(
  pool: DatabasePool,
  store: EventStore,
  projection: Projection<T>,
  options: RunProjectionOptions = {},
): ProjectorHandle {
  const controller = new AbortController();
  const { signal } = controller;
  const live = tableIds(projection, (logical) => logical);
  const policy = isolationPolicy(options.isolation, signal, options.onParked);

  // A killed replay's tables are dropped beside the projector, never in its way: tried at its
  // first start on a current model, and again with backoff until they are gone (a reader held one,
  // or a replay was building and its tables were its own). Then looked for again now and then
  // while it runs: a replay killed meanwhile (`ops projections replay` stopped, a worker that
  // died) leaves tables that hold people erased since, and its own process is gone.
  let clearing: Promise<void> | undefined;
  const recheckMs = options.abandonedBuildCheckMs ?? ABANDONED_BUILD_CHECK_MS;
  const clearInBackground = async () => {
    let wait = CLEAR_RETRY_MS.first;
    while (!signal.aborted) {
      const outcome = await clearAbandonedBuild(pool, projection).catch((error: unknown) => {
        if (!signal.aborted)
          options.onError?.(new Error(`could not drop a killed replay's tables; trying again in ${wait} ms`, { cause: error }));
        return 'failed' as const;
      });
      await sleep(outcome === 'cleared' ? recheckMs : wait, undefined, { signal }).catch(() => undefined);
      wait = outcome === 'cleared' ? CLEAR_RETRY_MS.first : Math.min(wait * 2, CLEAR_RETRY_MS.max);
    }
  };
  const ensureBuilt = async () => {
    const checkpoint = await readCheckpoint(pool, projection.name);
    assertNotSuperseded(checkpoint, projection);
    if (checkpoint?.version === projection.version) {
      clearing ??= clearInBackground();
      return;
    }
    await replayProjection(pool, store, projection, {
      batchSize: options.batchSize,
      signal,
      isolation: options.isolation,
      onParked: options.onParked,
      onlyIfOutdated: true,
    });
    clearing ??= clearInBackground();
  };

  /**
   * Applies one page and moves the checkpoint to `to`; null when the checkpoint is not where we
   * left it. The first statement is the compare-and-set itself (it locks the checkpoint row and
   * moves it, counting every event as applied), so a page costs one round trip less than a
   * separate lock-then-update; the count is corrected in the rare page that parks events.
   * Commits are asynchronous unless the projection asks for durable pages (see the statement).
   */
  // The same statement sets the page's commit mode. Asynchronous by default (no wait for the
  // WAL flush): a crash can lose only the last pages, model and checkpoint together, and the
  // projector applies them again from the log; what readers see stays all or nothing per page.
  // A projection with `durablePages` commits synchronously: PostgreSQL makes a commit visible
  // only after its flush, so no reader sees a row that a crash could take back.
  const commitMode = pageCommitMode(projection);
  const compareAndSet = (events: readonly RecordedEvent[], expected: GlobalPosition, to: GlobalPosition) => sql.type(checkpointRow)`
    with commit_mode as materialized (select set_config('synchronous_commit', ${commitMode}, true))
    update projection_checkpoints
    set commit_position = ${to.commit.toString()}, prepare_position = ${to.prepare.toString()},
        events_applied = events_applied + ${events.length}, updated_at = now()
    from commit_mode
    where name = ${projection.name} and version = ${projection.version}
      and commit_position = ${expected.commit.toString()}::numeric and prepare_position = ${expected.prepare.toString()}::numeric
    returning version, commit_position::text, prepare_position::text, events_applied, updated_at
  `;
  // The usual page (no isolation, no parked stream in sight) goes through the pipeline: the
  // same statements in the same transaction, in two socket writes (pagePipeline.ts).
  const pageUrl = connectionUrlOf(pool);
  const pipeline = pageUrl
    ? createPagePipeline(pageUrl, { applicationName: `employee-analytics-projector-${projection.name}` })
    : undefined;

  const commitPage = async (
    events: readonly RecordedEvent[],
    expected: GlobalPosition,
    to: GlobalPosition,
    isolate: boolean,
    mayHaveParked: boolean,
  ) => {
    if (pipeline && !isolate && !mayHaveParked) {
      const moved = await pipeline.page(compareAndSet(events, expected, to), async (tx) => {
        if (events.length > 0) await projection.handle(tx, events, live);
      });
      const [row] = (moved ?? []) as Array<z.infer<typeof checkpointRow>>;
      // Someone else moved it (replay swap, another instance, a newer version): resubscribe.
      return row ? { checkpoint: toCheckpoint(projection.name, row), parked: 0 } : null;
    }
    return pool.transaction(async (tx) => {
      const moved = await tx.maybeOne(compareAndSet(events, expected, to));
      // Someone else moved it (replay swap, another instance, a newer version): resubscribe.
      if (!moved) return null;
      let outcome = { applied: 0, parked: 0 };
      if (events.length > 0) {
        // A stream with a parked event has its later events parked behind it (never out of order).
        const first = events[0];
        const blocked =
          mayHaveParked && first
            ? await parkedStreams(tx, projection, [...new Set(events.map((e) => e.streamId))], first.position)
            : new Map<string, string>();
        outcome = await applyWithParking(tx, projection, events, live, { isolate, blocked, policy });
      }
      const skipped = events.length - outcome.applied;
      if (skipped > 0) {
        await tx.query(sql.type(ignoredRows)`
          update projection_checkpoints set events_applied = events_applied - ${skipped} where name = ${projection.name}
        `);
      }
      const checkpoint = toCheckpoint(projection.name, moved);
      return { checkpoint: { ...checkpoint, eventsApplied: checkpoint.eventsApplied - skipped }, parked: outcome.parked };
    });
  };

  const follow = async (onProgress: () => void) => {
    const start = await readCheckpoint(pool, projection.name);
    if (!start) throw new Error(`projection ${projection.name} has no checkpoint`);
    let expected = start.position;
    let mayHaveParked = await hasParkedEvents(pool, projection);
    // This subscription's own signal: stopping the projector, or leaving this loop, ends it.
    const subscription = new AbortController();
    const pages = readAhead(
      store.subscribeToAll({
        after: expected,
        eventTypes: projection.eventTypes,
        maxCount: options.batchSize ?? 500,
        pollIntervalMs: options.pollIntervalMs,
        signal: AbortSignal.any([signal, subscription.signal]),
      }),
      () => subscription.abort(),
    );
    for await (const page of pages) {
      // Drop anything at or before the checkpoint (duplicates after a reconnect). A page that
      // ends at or before it is stale as a whole: committing it would move the checkpoint back.
      if (comparePositions(page.checkpoint, expected) <= 0) continue;
      const events = page.events.filter((e) => comparePositions(e.position, expected) > 0);
      let committed;
      try {
        committed = await commitPage(events, expected, page.checkpoint, false, mayHaveParked);
      } catch (error) {
        if (signal.aborted || classifyFailure(error) === 'transient') throw error;
        // Deterministic: some event of the page cannot be applied. Isolate it, park it, go on.
        committed = await commitPage(events, expected, page.checkpoint, true, mayHaveParked);
      }
      if (!committed) return;
      if (committed.parked > 0) mayHaveParked = true;
      expected = committed.checkpoint.position;
      onProgress();
      options.onBatch?.(committed.checkpoint);
    }
  };

  const done = (async (): Promise<ProjectorStopReason> => {
    try {
      return await follows();
    } finally {
      // Stopped or superseded alike: the cleanup beside it ends too (a newer version owns the model).
      controller.abort();
      try {
        await pipeline?.end();
      } finally {
        await clearing;
      }
    }
  })();
  async function follows(): Promise<ProjectorStopReason> {
    let backoff = TRANSIENT_BACKOFF_MS.first;
    while (!signal.aborted) {
      try {
        await ensureBuilt();
        await follow(() => (backoff = TRANSIENT_BACKOFF_MS.first));
      } catch (error) {
        if (signal.aborted) break;
        options.onError?.(error);
        if (error instanceof ProjectionSupersededError) return 'superseded';
        await sleep(backoff, undefined, { signal }).catch(() => undefined); // rejects on abort: the loop then ends
        backoff = Math.min(backoff * 2, TRANSIENT_BACKOFF_MS.max);
      }
    }
    return 'stopped';
  }

  return {
    done,
    async stop() {
      controller.abort();
      await done;
    },
  };
}
