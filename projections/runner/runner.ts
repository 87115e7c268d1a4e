import { AsyncResource } from 'node:async_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import type { FragmentSqlToken, IdentifierSqlToken } from 'slonik';
import { connectionUrlOf, sql, type DatabasePool, type DatabaseTransactionConnection, type Queryable } from '../../shared/db/pool.ts';
import { bulkLoad } from './bulkLoad.ts';
import {
  START,
  comparePositions,
  type EventStore,
  type GlobalPosition,
  type ReadAllPage,
  type RecordedEvent,
} from '../../shared/event-store/port.ts';
import type { Projection } from './projection.ts';
import { checkpointListenerFor } from './checkpointNotifications.ts';
import { checkpointRow, readCheckpoint, toCheckpoint, type Checkpoint } from './checkpoints.ts';
import { classifyFailure } from './failures.ts';
import { applyWithParking, isolationPolicy, type IsolationPolicy } from './isolation.ts';
import { createPagePipeline } from './pagePipeline.ts';
import { RebuildRaceError, hasParkedEvents, liveParkedEvents, parkedStreams, replayLockKey } from './parking.ts';
import { createApplyOrder, readLateApplies, recordLateApplies } from './applyOrder.ts';

export { readCheckpoint, type Checkpoint } from './checkpoints.ts';

/**
 * Thrown when the stored model was built by a newer version of a projection than this code's:
 * during a rolling deploy the old projector must stop, not rebuild the model back (defect 10).
 */
export class ProjectionSupersededError extends Error {
  readonly projection: string;
  readonly storedVersion: number;
  readonly codeVersion: number;
  constructor(projection: string, storedVersion: number, codeVersion: number) {
    super(`projection ${projection} is built at version ${storedVersion}, newer than this code's version ${codeVersion}: not rebuilding it`);
    this.name = 'ProjectionSupersededError';
    this.projection = projection;
    this.storedVersion = storedVersion;
    this.codeVersion = codeVersion;
  }
}

/** The version guard: never replace a model built by a newer version with an older one. */
export function assertNotSuperseded(checkpoint: Pick<Checkpoint, 'version'> | null, projection: Pick<Projection, 'name' | 'version'>): void {
  if (checkpoint && checkpoint.version > projection.version) {
    throw new ProjectionSupersededError(projection.name, checkpoint.version, projection.version);
  }
}

const tableIds = <T extends string>(projection: Projection<T>, physical: (logical: string) => string) =>
  Object.fromEntries(Object.keys(projection.tables).map((t) => [t, sql.identifier([physical(t)])])) as Record<T, IdentifierSqlToken>;

/** Each table's statements, split into what creates it and what a bulk load builds afterwards. */
function tableStatements<T extends string>(projection: Projection<T>, physical: (logical: string) => string) {
  return (Object.entries(projection.tables) as [T, Projection<T>['tables'][T]][]).map(([logical, define]) => {
    const name = physical(logical);
    const statements = define(sql.identifier([name]), (suffix) => sql.identifier([`${name}_${suffix}`]));
    const split = 'create' in statements ? statements : { create: statements, afterLoad: [] };
    return { logical, table: sql.identifier([name]), ...split };
  });
}

async function run(tx: Pick<DatabaseTransactionConnection, 'query'>, statements: readonly FragmentSqlToken[]): Promise<void> {
  for (const statement of statements) await tx.query(sql.type(z.object({}))`${statement}`);
}

/**
 * Settings of a rebuild's own transactions. Losing one to a crash loses nothing: the shadow
 * tables are dropped and rebuilt by the next replay, and the swap (the only transaction readers
 * depend on) stays synchronous. No statement timeout: one statement loads or indexes a whole
 * table; the build holds its advisory lock, not row locks readers wait on.
 */
const replayTransactionSettings = sql.type(z.object({}))`
  select set_config('synchronous_commit', 'off', true), set_config('statement_timeout', '0', true),
         set_config('maintenance_work_mem', '256MB', true), set_config('work_mem', '64MB', true)
`;

/** `processed`: events read from the log; `parked`: those of them parked instead of applied. */
export type ReplayResult = { processed: number; parked: number; position: GlobalPosition };

export type ProgressListener = (progress: { processed: number; position: GlobalPosition; head: GlobalPosition }) => void;

type ReplaySource = {
  readPage(after: GlobalPosition): Promise<ReadAllPage>;
  readHead(): Promise<GlobalPosition>;
  /** The log from the first event up to its head now, in large pages (bulk read, or pages of readPage). */
  readBulk(): AsyncIterable<ReadAllPage>;
};

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
    const lockKey = replayLockKey(projection.name);
    // Polled, not waited for inside pg_advisory_lock: behind another copy's build (a version bump
    // on several projectors) that wait would outlast the pool's statement timeout.
    while (!(await connection.oneFirst(sql.type(z.object({ locked: z.boolean() }))`select pg_try_advisory_lock(hashtext(${lockKey})) as locked`))) {
      if (options.signal?.aborted) throw new Error('replay aborted');
      await sleep(REPLAY_LOCK_POLL_MS, undefined, { signal: options.signal }).catch(() => undefined);
    }
    try {
      const stored = await readCheckpoint(connection, projection.name);
      if (!options.allowDowngrade) assertNotSuperseded(stored, projection);
      if (options.onlyIfOutdated && stored?.version === projection.version) return { processed: 0, parked: 0, position: stored.position };
      await dropAbandonedShadows(connection, projection);
      return await buildAndSwap(connection, { readPage, readHead, readBulk }, projection, { ...options, connectionUrl: connectionUrlOf(pool) });
    } finally {
      await connection.query(sql.type(z.object({}))`select pg_advisory_unlock(hashtext(${lockKey}))`);
    }
  });
}

const REPLAY_LOCK_POLL_MS = 200;

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

async function dropAbandonedShadows(
  connection: Pick<DatabasePool, 'any' | 'query'>,
  projection: Projection<string>,
): Promise<void> {
  for (const logical of Object.keys(projection.tables)) {
    const stale = await connection.any(sql.type(z.object({ name: z.string() }))`
      select tablename as name from pg_tables
      where schemaname = current_schema() and (tablename like ${`${logical}\\_\\_g%`} or tablename like ${`${logical}\\_\\_retired\\_%`})
    `);
    for (const { name } of stale) {
      await connection.query(sql.type(z.object({}))`drop table if exists ${sql.identifier([name])}`);
    }
  }
}

async function buildAndSwap<T extends string>(
  connection: Queryable & Pick<DatabasePool, 'transaction'>,
  log: ReplaySource,
  projection: Projection<T>,
  options: {
    onProgress?: ProgressListener;
    signal?: AbortSignal;
    allowDowngrade?: boolean;
    connectionUrl?: string | undefined;
    isolation?: Partial<Pick<IsolationPolicy, 'maxAttempts' | 'backoffMs'>>;
    onParked?: (event: RecordedEvent, error: string) => void;
  },
): Promise<ReplayResult> {
  const generation = `${Date.now().toString(36)}${Math.floor(Math.random() * 1296).toString(36)}`;
  const shadowName = (logical: string) => `${logical}__g${generation}`;
  const shadow = tableIds(projection, shadowName);
  const statements = tableStatements(projection, shadowName);
  const bulk = projection.bulk;
  await connection.transaction(async (tx) => {
    for (const table of statements) await run(tx, bulk ? table.create : [...table.create, ...table.afterLoad]);
  });

  let position = START;
  let processed = 0;
  const head = await log.readHead();
  const policy = isolationPolicy(options.isolation, options.signal);
  // Poison events are isolated and parked exactly as by the live projector (isolation.ts), under
  // the projection's NEW version: the replay starts with no stream blocked (every event of the
  // log is tried again) and blocks the streams it parks itself. `blocked` and `parkedIds` only
  // take a page's outcome once its transaction has committed.
  let blocked = new Map<string, string>();
  const parkedIds = new Set<string>();
  const applyParking = async (tx: DatabaseTransactionConnection, events: readonly RecordedEvent[], isolate: boolean, maxAttempts = policy.maxAttempts) => {
    const pageBlocked = new Map(blocked);
    const parked: { event: RecordedEvent; error: string }[] = [];
    const outcome = await applyWithParking(tx, projection, events, shadow, {
      isolate,
      blocked: pageBlocked,
      policy: { ...policy, maxAttempts, onParked: (event, error) => parked.push({ event, error }) },
    });
    return { outcome, blocked: pageBlocked, parked };
  };
  // The order of the live model (applyOrder.ts): events `projections retry` or an earlier swap
  // applied late go at the same point again, and events parked in the live model, with every
  // later event of their streams, go last, in the swap, as `retry` would apply them after the
  // fix. So a model that numbers its rows as applied (the change feed) keeps its order, and a
  // fix deployed with a rebuild reaches readers past those events' positions. The live
  // projector (older code, on a version bump) may park more while this one builds: the parked
  // set is read again before every page and in the swap. One it parks behind the build's
  // position was already applied in place: the swap then refuses (RebuildRaceError), and the
  // next build defers it.
  let liveParked = new Map<string, GlobalPosition>();
  const readLiveParked = async (db: Queryable = connection) => {
    liveParked = await liveParkedEvents(db, projection);
  };
  const late = await readLateApplies(connection, projection.name);
  let order = createApplyOrder(late, () => liveParked);
  const adopt = (result: Awaited<ReturnType<typeof applyParking>>) => {
    blocked = result.blocked;
    for (const { event, error } of result.parked) {
      parkedIds.add(event.id);
      options.onParked?.(event, error);
    }
    processed += result.outcome.applied + result.outcome.parked;
  };
  /** One page in its own transaction: the whole page first, then (deterministic failure) isolated in a fresh one. */
  const applyPage = async (events: readonly RecordedEvent[]) => {
    if (events.length === 0) return;
    const attempt = (isolate: boolean) =>
      connection.transaction(async (tx) => {
        await tx.query(replayTransactionSettings);
        return applyParking(tx, events, isolate);
      });
    let result;
    try {
      result = await attempt(false);
    } catch (error) {
      if (options.signal?.aborted || classifyFailure(error) === 'transient') throw error;
      result = await attempt(true);
    }
    adopt(result);
  };
  const aborted = () => {
    if (options.signal?.aborted) throw new Error('replay aborted');
  };
  try {
    if (bulk) {
      try {
        const fold = bulk.fold();
        for await (const page of log.readBulk()) {
          aborted();
          await readLiveParked();
          for (const run of order.runs(page.events)) {
            fold.add(run);
            processed += run.length;
          }
          position = page.checkpoint;
          options.onProgress?.({ processed, position, head });
        }
        aborted();
        const rows = fold.rows();
        await bulkLoad(
          connection,
          options.connectionUrl,
          statements.map((t) => ({ table: t.table, name: shadowName(t.logical), rows: rows[t.logical], afterLoad: t.afterLoad })),
        );
      } catch (error) {
        if (options.signal?.aborted || classifyFailure(error) === 'transient') throw error;
        // A deterministic failure of the bulk path (the fold threw on an event, or PostgreSQL
        // refused a row of the load, e.g. a hire date in year 0): the in-memory fold cannot say
        // which event produced a bad row (rows are the state after many events), and COPY stops
        // at the first bad row. So the whole replay falls back to the page-by-page path below,
        // which isolates and parks the poison events like the live projector. The load ran in
        // one transaction and rolled back; the shadow tables are recreated empty, with their
        // keys and indexes, for it. A poison event costs the rebuild its bulk speed, never its end.
        await connection.transaction(async (tx) => {
          for (const table of statements) {
            await tx.query(sql.type(z.object({}))`drop table if exists ${table.table}`);
            await run(tx, [...table.create, ...table.afterLoad]);
          }
        });
        position = START;
        processed = 0;
        order = createApplyOrder(late, () => liveParked);
      }
    }
    // Page by page (everything without a bulk path or whose bulk load failed; after a bulk load,
    // what committed meanwhile). Pipelined: the next page is read (on the store's connections)
    // while this one is applied.
    let page = await log.readPage(position);
    while (comparePositions(page.checkpoint, position) !== 0) {
      aborted();
      const current = page;
      const next = log.readPage(current.checkpoint);
      next.catch(() => undefined); // awaited below; this only keeps a failure of an abandoned read quiet
      await readLiveParked();
      for (const run of order.runs(current.events)) await applyPage(run);
      position = current.checkpoint;
      options.onProgress?.({ processed, position, head });
      page = await next;
    }
    // The swap: synchronous commit (readers and the live projector depend on it).
    const swapped: Awaited<ReturnType<typeof applyParking>>[] = [];
    // slonik runs a transaction's body again after a serialization failure or deadlock: each run
    // starts from the state the pages left.
    const blockedBeforeSwap = blocked;
    const restoreHeld = order.save();
    const swapFrom = position;
    await connection.transaction(async (tx) => {
      blocked = new Map(blockedBeforeSwap);
      restoreHeld();
      swapped.length = 0;
      const stored = await readCheckpoint(tx, projection.name, true);
      // A newer version swapped in while this one was building: keep it (version guard).
      if (!options.allowDowngrade) assertNotSuperseded(stored, projection);
      await readLiveParked(tx);
      const held = order.heldIds();
      const appliedInPlace = [...liveParked]
        .filter(([id, at]) => comparePositions(at, swapFrom) <= 0 && !parkedIds.has(id) && !held.has(id))
        .map(([id]) => id);
      if (appliedInPlace.length > 0) throw new RebuildRaceError(projection.name, appliedInPlace);
      // Under the checkpoint lock: apply whatever committed since the last page, each failing
      // event isolated in a savepoint (this transaction cannot be retried page by page).
      let swapPosition = swapFrom;
      for (;;) {
        const page = await log.readPage(swapPosition);
        if (comparePositions(page.checkpoint, swapPosition) === 0) break;
        for (const run of order.runs(page.events)) {
          const result = await applyParking(tx, run, true);
          blocked = result.blocked;
          swapped.push(result);
        }
        swapPosition = page.checkpoint;
      }
      // Last, what is still held: late applies whose point no event passed, in their order; then
      // the events parked in the live model (and their streams' later ones), in log order, tried
      // once each (they failed live already) since the live projector waits meanwhile, and
      // recorded as applied after the swap's position.
      const last = order.rest();
      for (const [events, attempts] of [[last.late, policy.maxAttempts], [last.parked, 1]] as const) {
        if (events.length === 0) continue;
        const result = await applyParking(tx, events, true, attempts);
        blocked = result.blocked;
        swapped.push(result);
      }
      const parkedHere = new Set([...parkedIds, ...swapped.flatMap((r) => r.parked.map((p) => p.event.id))]);
      const lateIds = last.parked.map((event) => event.id).filter((id) => !parkedHere.has(id));
      await recordLateApplies(tx, projection.name, lateIds, swapPosition);
      // Events of this version parked before (a previous run of this replay, or the live
      // projector when the same version is rebuilt) that this build applied are no longer
      // parked: the new model has them. Those it parked again stay one row each (parkEvent upserts).
      await tx.query(sql.type(z.object({}))`
        update projection_parked_events set status = 'retried', resolved_at = now()
        where projection = ${projection.name} and version = ${projection.version} and status = 'parked'
          and (commit_position, prepare_position) <= (${swapPosition.commit.toString()}::numeric, ${swapPosition.prepare.toString()}::numeric)
          and not (event_id = any(${sql.array([...parkedHere], 'text')}))
      `);
      // On a version bump, the live version's parked rows of the events this build applied last.
      if (stored && stored.version !== projection.version && lateIds.length > 0) {
        await tx.query(sql.type(z.object({}))`
          update projection_parked_events set status = 'retried', resolved_at = now()
          where projection = ${projection.name} and version = ${stored.version} and status = 'parked'
            and event_id = any(${sql.array(lateIds, 'text')})
        `);
      }
      for (const logical of Object.keys(projection.tables)) {
        const live = sql.identifier([logical]);
        const retired = sql.identifier([`${logical}__retired_${generation}`]);
        await tx.query(sql.type(z.object({}))`alter table if exists ${live} rename to ${retired}`);
        await tx.query(sql.type(z.object({}))`alter table ${sql.identifier([shadowName(logical)])} rename to ${live}`);
        await tx.query(sql.type(z.object({}))`drop table if exists ${retired}`);
      }
      const swappedEvents = swapped.reduce((n, r) => n + r.outcome.applied + r.outcome.parked, 0);
      const parkedTotal = parkedHere.size;
      await tx.query(sql.type(z.object({}))`
        insert into projection_checkpoints (name, version, commit_position, prepare_position, events_applied, updated_at)
        values (${projection.name}, ${projection.version}, ${swapPosition.commit.toString()}, ${swapPosition.prepare.toString()},
          ${processed + swappedEvents - parkedTotal}, now())
        on conflict (name) do update set version = excluded.version, commit_position = excluded.commit_position,
          prepare_position = excluded.prepare_position, events_applied = excluded.events_applied, updated_at = now()
      `);
      position = swapPosition;
    });
    for (const result of swapped) adopt(result);
    options.onProgress?.({ processed, position, head: position });
    return { processed, parked: parkedIds.size, position };
  } catch (error) {
    await connection
      .transaction(async (tx) => {
        for (const logical of Object.keys(projection.tables)) {
          await tx.query(sql.type(z.object({}))`drop table if exists ${sql.identifier([shadowName(logical)])}`);
        }
      })
      .catch(() => undefined);
    throw error;
  }
}

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
};

/** Backoff after a transient failure (database down, deadlock): doubles from 50 ms up to 2 s. */
const TRANSIENT_BACKOFF_MS = { first: 50, max: 2_000 };

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

  const ensureBuilt = async () => {
    const checkpoint = await readCheckpoint(pool, projection.name);
    assertNotSuperseded(checkpoint, projection);
    if (checkpoint?.version === projection.version) return;
    await replayProjection(pool, store, projection, {
      batchSize: options.batchSize,
      signal,
      isolation: options.isolation,
      onParked: options.onParked,
      onlyIfOutdated: true,
    });
  };

  /**
   * Applies one page and moves the checkpoint to `to`; null when the checkpoint is not where we
   * left it. The first statement is the compare-and-set itself (it locks the checkpoint row and
   * moves it, counting every event as applied), so a page costs one round trip less than a
   * separate lock-then-update; the count is corrected in the rare page that parks events.
   * Commits are asynchronous (see the statement): live lag does not wait for fsync.
   */
  // The same statement makes the page's commit asynchronous (no wait for the WAL flush): a
  // crash can lose only the last pages, model and checkpoint together, and the projector
  // applies them again from the log. What readers see stays all or nothing per page.
  const compareAndSet = (events: readonly RecordedEvent[], expected: GlobalPosition, to: GlobalPosition) => sql.type(checkpointRow)`
    with asynchronous as materialized (select set_config('synchronous_commit', 'off', true))
    update projection_checkpoints
    set commit_position = ${to.commit.toString()}, prepare_position = ${to.prepare.toString()},
        events_applied = events_applied + ${events.length}, updated_at = now()
    from asynchronous
    where name = ${projection.name} and version = ${projection.version}
      and commit_position = ${expected.commit.toString()}::numeric and prepare_position = ${expected.prepare.toString()}::numeric
    returning version, commit_position::text, prepare_position::text, events_applied, updated_at
  `;
  // The usual page (no isolation, no parked stream in sight) goes through the pipeline: the
  // same statements in the same transaction, in two socket writes (pagePipeline.ts).
  const pageUrl = connectionUrlOf(pool);
  const pipeline = pageUrl ? createPagePipeline(pageUrl, { applicationName: `employee-analytics-projector-${projection.name}` }) : undefined;

  const commitPage = async (events: readonly RecordedEvent[], expected: GlobalPosition, to: GlobalPosition, isolate: boolean, mayHaveParked: boolean) => {
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
          mayHaveParked && first ? await parkedStreams(tx, projection, [...new Set(events.map((e) => e.streamId))], first.position) : new Map<string, string>();
        outcome = await applyWithParking(tx, projection, events, live, { isolate, blocked, policy });
      }
      const skipped = events.length - outcome.applied;
      if (skipped > 0) {
        await tx.query(sql.type(z.object({}))`
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
      await pipeline?.end();
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
