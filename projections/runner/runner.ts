import { AsyncResource } from 'node:async_hooks';
import { z } from 'zod';
import type { IdentifierSqlToken } from 'slonik';
import { sql, type DatabasePool, type DatabaseTransactionConnection } from '../../shared/db/pool.ts';
import type { Migration } from '../../shared/db/migrate.ts';
import {
  START,
  comparePositions,
  type EventStore,
  type GlobalPosition,
  type ReadAllPage,
  type RecordedEvent,
} from '../../shared/event-store/port.ts';
import type { Projection } from './projection.ts';

export const projectionRunnerMigrations: readonly Migration[] = [
  {
    id: 'projections/001-checkpoints',
    sql: `
      create table projection_checkpoints (
        name text primary key,
        version integer not null,
        commit_position numeric(20, 0) not null,
        prepare_position numeric(20, 0) not null,
        events_applied bigint not null default 0,
        updated_at timestamptz not null default now()
      );
      grant select on projection_checkpoints to eas_tenant;
    `,
  },
];

const checkpointRow = z.object({
  version: z.number(),
  commit_position: z.string(),
  prepare_position: z.string(),
  events_applied: z.number(),
  updated_at: z.string(),
});

export type Checkpoint = {
  readonly name: string;
  readonly version: number;
  readonly position: GlobalPosition;
  readonly eventsApplied: number;
  readonly updatedAt: string;
};

const toCheckpoint = (name: string, row: z.infer<typeof checkpointRow>): Checkpoint => ({
  name,
  version: row.version,
  position: { commit: BigInt(row.commit_position), prepare: BigInt(row.prepare_position) },
  eventsApplied: row.events_applied,
  updatedAt: row.updated_at,
});

export async function readCheckpoint(db: Pick<DatabasePool, 'maybeOne'>, name: string, lock = false): Promise<Checkpoint | null> {
  const row = await db.maybeOne(sql.type(checkpointRow)`
    select version, commit_position::text, prepare_position::text, events_applied, updated_at
    from projection_checkpoints where name = ${name} ${lock ? sql.fragment`for update` : sql.fragment``}
  `);
  return row ? toCheckpoint(name, row) : null;
}

const tableIds = <T extends string>(projection: Projection<T>, physical: (logical: string) => string) =>
  Object.fromEntries(Object.keys(projection.tables).map((t) => [t, sql.identifier([physical(t)])])) as Record<T, IdentifierSqlToken>;

async function createTables<T extends string>(
  tx: DatabaseTransactionConnection,
  projection: Projection<T>,
  physical: (logical: string) => string,
): Promise<void> {
  for (const [logical, define] of Object.entries(projection.tables) as [T, Projection<T>['tables'][T]][]) {
    const name = physical(logical);
    for (const statement of define(sql.identifier([name]), (suffix) => sql.identifier([`${name}_${suffix}`]))) {
      await tx.query(sql.type(z.object({}))`${statement}`);
    }
  }
}

export type ProgressListener = (progress: { processed: number; position: GlobalPosition; head: GlobalPosition }) => void;

/**
 * Rebuilds a projection from the first event into shadow tables, then swaps them in atomically.
 * Readers keep using the live tables until the swap; the swap holds the live checkpoint row so
 * the live projector cannot commit in between, applies the last events, renames, and moves
 * the checkpoint — all in one transaction.
 */
export async function replayProjection<T extends string>(
  pool: DatabasePool,
  store: EventStore,
  projection: Projection<T>,
  options: { batchSize?: number; onProgress?: ProgressListener; signal?: AbortSignal } = {},
): Promise<{ processed: number; position: GlobalPosition }> {
  // The store reads on its own connections. Bound here, outside the connection's async context,
  // so slonik does not take the store's pool queries for a foreign connection inside it.
  const batchSize = options.batchSize ?? 2_000;
  const readPage = AsyncResource.bind((after: GlobalPosition) =>
    store.readAll({ after, maxCount: batchSize, eventTypes: projection.eventTypes }),
  );
  const readHead = AsyncResource.bind(() => store.headPosition());
  // One replay per projection at a time, held for the whole build on one connection; it also
  // makes it safe to drop shadow tables that a killed replay left behind.
  return pool.connect(async (connection) => {
    const lockKey = `projection-replay:${projection.name}`;
    await connection.query(sql.type(z.object({}))`select pg_advisory_lock(hashtext(${lockKey}))`);
    try {
      await dropAbandonedShadows(connection, projection);
      return await buildAndSwap(connection, { readPage, readHead }, projection, options);
    } finally {
      await connection.query(sql.type(z.object({}))`select pg_advisory_unlock(hashtext(${lockKey}))`);
    }
  });
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
  connection: Pick<DatabasePool, 'transaction'>,
  log: { readPage(after: GlobalPosition): Promise<ReadAllPage>; readHead(): Promise<GlobalPosition> },
  projection: Projection<T>,
  options: { onProgress?: ProgressListener; signal?: AbortSignal },
): Promise<{ processed: number; position: GlobalPosition }> {
  const generation = `${Date.now().toString(36)}${Math.floor(Math.random() * 1296).toString(36)}`;
  const shadowName = (logical: string) => `${logical}__g${generation}`;
  const shadow = tableIds(projection, shadowName);
  await connection.transaction((tx) => createTables(tx, projection, shadowName));

  let position = START;
  let processed = 0;
  const head = await log.readHead();
  const applyPage = async (tx: DatabaseTransactionConnection, events: readonly RecordedEvent[]) => {
    if (events.length > 0) await projection.handle(tx, events, shadow);
    processed += events.length;
  };
  try {
    // Pipelined: the next page is read (on the store's connections) while this one is applied.
    let page = await log.readPage(position);
    while (comparePositions(page.checkpoint, position) !== 0) {
      if (options.signal?.aborted) throw new Error('replay aborted');
      const current = page;
      const next = log.readPage(current.checkpoint);
      next.catch(() => undefined); // awaited below; this only keeps a failure of an abandoned read quiet
      await connection.transaction((tx) => applyPage(tx, current.events));
      position = current.checkpoint;
      options.onProgress?.({ processed, position, head });
      page = await next;
    }
    await connection.transaction(async (tx) => {
      await readCheckpoint(tx, projection.name, true);
      // Under the checkpoint lock: apply whatever committed since the last page.
      for (;;) {
        const page = await log.readPage(position);
        if (comparePositions(page.checkpoint, position) === 0) break;
        await applyPage(tx, page.events);
        position = page.checkpoint;
      }
      for (const logical of Object.keys(projection.tables)) {
        const live = sql.identifier([logical]);
        const retired = sql.identifier([`${logical}__retired_${generation}`]);
        await tx.query(sql.type(z.object({}))`alter table if exists ${live} rename to ${retired}`);
        await tx.query(sql.type(z.object({}))`alter table ${sql.identifier([shadowName(logical)])} rename to ${live}`);
        await tx.query(sql.type(z.object({}))`drop table if exists ${retired}`);
      }
      await tx.query(sql.type(z.object({}))`
        insert into projection_checkpoints (name, version, commit_position, prepare_position, events_applied, updated_at)
        values (${projection.name}, ${projection.version}, ${position.commit.toString()}, ${position.prepare.toString()}, ${processed}, now())
        on conflict (name) do update set version = excluded.version, commit_position = excluded.commit_position,
          prepare_position = excluded.prepare_position, events_applied = excluded.events_applied, updated_at = now()
      `);
    });
    options.onProgress?.({ processed, position, head: position });
    return { processed, position };
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

export type ProjectorHandle = {
  /** Resolves when the projector has stopped (after finishing the batch in hand). */
  stop(): Promise<void>;
  readonly done: Promise<void>;
};

export type RunProjectionOptions = {
  readonly batchSize?: number;
  readonly pollIntervalMs?: number;
  readonly onBatch?: (checkpoint: Checkpoint) => void;
  readonly onError?: (error: unknown) => void;
};

/**
 * Keeps one projection live: (re)builds it when it is missing or its version changed, then
 * follows the log. Each page's writes and its checkpoint commit in one transaction; the
 * checkpoint update is a compare-and-set, so a second projector instance that raced this one
 * rolls back instead of applying a page twice.
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

  const ensureBuilt = async () => {
    const checkpoint = await readCheckpoint(pool, projection.name);
    if (checkpoint?.version === projection.version) return;
    await replayProjection(pool, store, projection, { batchSize: options.batchSize, signal });
  };

  const follow = async () => {
    const start = await readCheckpoint(pool, projection.name);
    if (!start) throw new Error(`projection ${projection.name} has no checkpoint`);
    let expected = start.position;
    const pages = store.subscribeToAll({
      after: expected,
      eventTypes: projection.eventTypes,
      maxCount: options.batchSize ?? 500,
      pollIntervalMs: options.pollIntervalMs,
      signal,
    });
    for await (const page of pages) {
      // Drop anything at or before the checkpoint (duplicates after a reconnect). A page that
      // ends at or before it is stale as a whole: committing it would move the checkpoint back.
      if (comparePositions(page.checkpoint, expected) <= 0) continue;
      const events = page.events.filter((e) => comparePositions(e.position, expected) > 0);
      const committed = await pool.transaction(async (tx) => {
        const current = await readCheckpoint(tx, projection.name, true);
        if (!current || current.version !== projection.version || comparePositions(current.position, expected) !== 0) {
          return null; // someone else moved it (replay swap, another instance): resubscribe
        }
        if (events.length > 0) await projection.handle(tx, events, live);
        const row = await tx.one(sql.type(checkpointRow)`
          update projection_checkpoints
          set commit_position = ${page.checkpoint.commit.toString()}, prepare_position = ${page.checkpoint.prepare.toString()},
              events_applied = events_applied + ${events.length}, updated_at = now()
          where name = ${projection.name}
          returning version, commit_position::text, prepare_position::text, events_applied, updated_at
        `);
        return toCheckpoint(projection.name, row);
      });
      if (!committed) return;
      expected = committed.position;
      options.onBatch?.(committed);
    }
  };

  const done = (async () => {
    while (!signal.aborted) {
      try {
        await ensureBuilt();
        await follow();
      } catch (error) {
        if (signal.aborted) break;
        options.onError?.(error);
        await new Promise((r) => setTimeout(r, 1_000));
      }
    }
  })();

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
 * timeout passes. Returns whether it was reached. Polls the checkpoint table, so it works for
 * a gateway in another process than the projector.
 */
export async function waitForCheckpoint(
  pool: DatabasePool,
  name: string,
  position: GlobalPosition,
  timeoutMs: number,
  pollMs = 10,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const checkpoint = await readCheckpoint(pool, name);
    if (checkpoint && comparePositions(checkpoint.position, position) >= 0) return true;
    if (Date.now() >= deadline) return false;
    await new Promise((r) => setTimeout(r, Math.min(pollMs, Math.max(0, deadline - Date.now()))));
  }
}
