import { ignoredRows, sql, type DatabasePool, type DatabaseTransactionConnection, type Queryable } from '../db/pool.ts';
import { START, comparePositions, type GlobalPosition, type ReadAllPage, type RecordedEvent } from '../event-store/port.ts';
import { createApplyOrder, readLateApplies } from './applyOrder.ts';
import { bulkLoad, rebuildTransactionSettings } from './bulkLoad.ts';
import { readCheckpoint } from './checkpoints.ts';
import { setCommitMode } from './commitMode.ts';
import { classifyFailure } from './failures.ts';
import { applyWithParking, isolationPolicy, type IsolationPolicy } from './isolation.ts';
import { RebuildRaceError, liveParkedEvents } from './parking.ts';
import type { Projection } from './projection.ts';
import { dropShadows, runStatements, tableIds, tableStatements } from './shadowTables.ts';
import { swapIn } from './swap.ts';
import { assertNotSuperseded } from './versionGuard.ts';

/** `processed`: events read from the log; `parked`: those of them parked instead of applied. */
export type ReplayResult = { processed: number; parked: number; position: GlobalPosition };

export type ProgressListener = (progress: { processed: number; position: GlobalPosition; head: GlobalPosition }) => void;

export type ReplaySource = {
  readPage(after: GlobalPosition): Promise<ReadAllPage>;
  readHead(): Promise<GlobalPosition>;
  /** The log from the first event up to its head now, in large pages (bulk read, or pages of readPage). */
  readBulk(): AsyncIterable<ReadAllPage>;
};

/**
 * Builds a projection from the first event into fresh shadow tables, then swaps them in (swap.ts).
 * Runs under the replay lock that `replayProjection` holds on `connection`.
 */
export async function buildAndSwap<T extends string>(
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
    for (const table of statements) await runStatements(tx, bulk ? table.create : [...table.create, ...table.afterLoad]);
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
  const applyParking = async (
    tx: DatabaseTransactionConnection,
    events: readonly RecordedEvent[],
    isolate: boolean,
    maxAttempts = policy.maxAttempts,
  ) => {
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
        await tx.query(rebuildTransactionSettings);
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
            await tx.query(sql.type(ignoredRows)`drop table if exists ${table.table}`);
            await runStatements(tx, [...table.create, ...table.afterLoad]);
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
    // The planner's statistics, before readers get the tables, however they were built: without
    // them it takes a rebuilt table for a small one until autovacuum comes by, and reads a whole
    // range of a tenant's rows and sorts them where a walk of the index in order would stop at
    // the page's end.
    await connection.transaction(async (tx) => {
      await tx.query(rebuildTransactionSettings);
      for (const table of statements) await tx.query(sql.type(ignoredRows)`analyze ${table.table}`);
    });
    aborted();
    // The swap: synchronous commit (readers and the live projector depend on it), set below.
    const swapped: Awaited<ReturnType<typeof applyParking>>[] = [];
    // slonik runs a transaction's body again after a serialization failure or deadlock: each run
    // starts from the state the pages left.
    const blockedBeforeSwap = blocked;
    const restoreHeld = order.save();
    const swapFrom = position;
    await connection.transaction(async (tx) => {
      // Synchronous whatever the database's default, for every projection: readers see the new
      // model at once, so a crash must not take it back (the swap is rare; its flush costs nothing).
      await tx.query(setCommitMode('on'));
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
      for (const [events, attempts] of [
        [last.late, policy.maxAttempts],
        [last.parked, 1],
      ] as const) {
        if (events.length === 0) continue;
        const result = await applyParking(tx, events, true, attempts);
        blocked = result.blocked;
        swapped.push(result);
      }
      const parkedHere = new Set([...parkedIds, ...swapped.flatMap((r) => r.parked.map((p) => p.event.id))]);
      const lateIds = last.parked.map((event) => event.id).filter((id) => !parkedHere.has(id));
      const swappedEvents = swapped.reduce((n, r) => n + r.outcome.applied + r.outcome.parked, 0);
      const eventsApplied = processed + swappedEvents - parkedHere.size;
      await swapIn(tx, projection, { stored, generation, shadowName, swapPosition, parkedHere, lateIds, eventsApplied });
      position = swapPosition;
    });
    for (const result of swapped) adopt(result);
    options.onProgress?.({ processed, position, head: position });
    return { processed, parked: parkedIds.size, position };
  } catch (error) {
    await dropShadows(connection, projection, shadowName);
    throw error;
  }
}
