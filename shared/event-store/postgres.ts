import pg from 'pg';
import { z } from 'zod';
import { UniqueIntegrityConstraintViolationError } from 'slonik';
import { sql, type DatabasePool } from '../db/pool.ts';
import type { Migration } from '../db/migrate.ts';
import { ConflictError, WrongExpectedRevisionError } from '../errors.ts';
import {
  START,
  matchesExpected,
  type AppendResult,
  type EventStore,
  type ExpectedRevision,
  type GlobalPosition,
  type NewEvent,
  type ReadAllOptions,
  type ReadAllPage,
  type RecordedEvent,
  type SubscribeOptions,
} from './port.ts';

/**
 * PostgreSQL adapter of the event-store port.
 *
 * Global order is (transaction id, sequence). A sequence number alone is not safe: numbers are
 * drawn at insert but become visible at commit, so a reader paging by sequence skips an event
 * whose transaction commits after a later-numbered one. Readers therefore only see events whose
 * transaction id is below the oldest transaction still in flight
 * (`pg_snapshot_xmin(pg_current_snapshot())`): everything below that horizon has committed or
 * aborted, so nothing can later appear before what has been read.
 */
export const eventStoreMigrations: readonly Migration[] = [
  {
    id: 'event-store/001-init',
    sql: `
      create table es_streams (
        stream_id text primary key,
        revision bigint not null
      );
      create table es_events (
        position bigint generated always as identity primary key,
        transaction_id xid8 not null default pg_current_xact_id(),
        stream_id text not null,
        revision bigint not null,
        event_id uuid not null unique,
        type text not null,
        data jsonb not null,
        metadata jsonb not null default '{}'::jsonb,
        recorded_at timestamptz not null default clock_timestamp(),
        unique (stream_id, revision)
      );
      create index es_events_global_order on es_events (transaction_id, position) include (type);
    `,
  },
];

const NOTIFY_CHANNEL = 'es_events';

const positionRow = z.object({ commit: z.string(), prepare: z.number() });
const eventRow = z.object({
  id: z.string(),
  stream_id: z.string(),
  revision: z.number(),
  type: z.string(),
  data: z.unknown(),
  metadata: z.record(z.string(), z.unknown()),
  commit: z.string(),
  prepare: z.number(),
  recorded_at: z.string(),
});

const toPosition = (row: z.infer<typeof positionRow>): GlobalPosition => ({
  commit: BigInt(row.commit),
  prepare: BigInt(row.prepare),
});

const toRecorded = (row: z.infer<typeof eventRow>): RecordedEvent => ({
  id: row.id,
  streamId: row.stream_id,
  revision: row.revision,
  type: row.type,
  data: row.data,
  metadata: row.metadata,
  position: toPosition(row),
  recordedAt: row.recorded_at,
});

const eventColumns = sql.fragment`
  event_id::text as id, stream_id, revision, type, data, metadata,
  transaction_id::text as commit, position as prepare, recorded_at
`;

/** Rows the reader may see: committed, and below every transaction still in flight. */
const visibleAfter = (after: GlobalPosition) => sql.fragment`
  (transaction_id, position) > (${after.commit.toString()}::xid8, ${after.prepare.toString()}::int8)
  and transaction_id < pg_snapshot_xmin(pg_current_snapshot())
`;

export type PostgresEventStoreOptions = {
  /** Connection string for the LISTEN connection that wakes live subscriptions. */
  readonly listenUrl?: string;
  /** How many log entries a filtered read scans at most before it returns a checkpoint. */
  readonly scanWindow?: number;
};

export function createPostgresEventStore(pool: DatabasePool, options: PostgresEventStoreOptions = {}): EventStore {
  const scanWindow = options.scanWindow ?? 10_000;
  const wakeups = createWakeups(options.listenUrl);

  async function findIdempotentAppend(streamId: string, events: readonly NewEvent[]): Promise<AppendResult | null> {
    const rows = await pool.any(sql.type(
      z.object({ stream_id: z.string(), revision: z.number(), commit: z.string(), prepare: z.number() }),
    )`
      select stream_id, revision, transaction_id::text as commit, position as prepare
      from es_events where event_id = any(${sql.array(events.map((e) => e.id), 'uuid')})
      order by revision
    `);
    if (rows.length === 0) return null;
    const last = rows.at(-1);
    const sameStream = rows.every((r) => r.stream_id === streamId);
    if (rows.length !== events.length || !sameStream || !last) {
      throw new ConflictError('Some of these event ids were already used by other events');
    }
    return { nextRevision: last.revision, position: toPosition(last) };
  }

  async function appendOnce(streamId: string, events: readonly NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
    return pool.transaction(async (tx) => {
      const current = await tx.maybeOneFirst(sql.type(z.object({ revision: z.number() }))`
        select revision from es_streams where stream_id = ${streamId} for update
      `);
      const actual = current ?? 'no_stream';
      if (!matchesExpected(expected, actual)) {
        throw new WrongExpectedRevisionError(streamId, String(expected), actual);
      }
      const first = current === null ? 0 : current + 1;
      const next = first + events.length - 1;
      if (current === null) {
        await tx.query(sql.type(z.object({}))`insert into es_streams (stream_id, revision) values (${streamId}, ${next})`);
      } else {
        await tx.query(sql.type(z.object({}))`update es_streams set revision = ${next} where stream_id = ${streamId}`);
      }
      const rows = events.map((e, i) => [
        streamId,
        first + i,
        e.id,
        e.type,
        JSON.stringify(e.data),
        JSON.stringify(e.metadata ?? {}),
      ]);
      const inserted = await tx.many(sql.type(positionRow)`
        insert into es_events (stream_id, revision, event_id, type, data, metadata)
        select * from ${sql.unnest(rows, ['text', 'int8', 'uuid', 'text', 'jsonb', 'jsonb'])}
        returning transaction_id::text as commit, position as prepare
      `);
      // Delivered at commit; only wakes live subscribers, correctness never depends on it.
      await tx.query(sql.type(z.object({}))`select pg_notify(${NOTIFY_CHANNEL}, '')`);
      const last = inserted.at(-1);
      if (!last) throw new Error('append inserted no rows');
      return { nextRevision: next, position: toPosition(last) };
    });
  }

  async function readAll(opts: ReadAllOptions = {}): Promise<ReadAllPage> {
    const after = opts.after ?? START;
    const maxCount = opts.maxCount ?? 1_000;
    if (!opts.eventTypes) {
      const rows = await pool.any(sql.type(eventRow)`
        select ${eventColumns} from es_events where ${visibleAfter(after)}
        order by transaction_id, position limit ${maxCount}
      `);
      const events = rows.map(toRecorded);
      return { events, checkpoint: events.at(-1)?.position ?? after };
    }
    // Filtered: first fix a horizon over at most `scanWindow` visible entries (index only),
    // then fetch the matching events up to it. Nothing can commit below the horizon later.
    const horizonRow = await pool.maybeOne(sql.type(positionRow)`
      select transaction_id::text as commit, position as prepare from (
        select transaction_id, position from es_events where ${visibleAfter(after)}
        order by transaction_id, position limit ${scanWindow}
      ) scanned order by transaction_id desc, position desc limit 1
    `);
    if (!horizonRow) return { events: [], checkpoint: after };
    const horizon = toPosition(horizonRow);
    const rows = await pool.any(sql.type(eventRow)`
      select ${eventColumns} from es_events
      where (transaction_id, position) > (${after.commit.toString()}::xid8, ${after.prepare.toString()}::int8)
        and (transaction_id, position) <= (${horizonRow.commit}::xid8, ${horizonRow.prepare}::int8)
        and type = any(${sql.array([...opts.eventTypes], 'text')})
      order by transaction_id, position limit ${maxCount}
    `);
    const events = rows.map(toRecorded);
    const checkpoint = events.length === maxCount ? (events.at(-1)?.position ?? horizon) : horizon;
    return { events, checkpoint };
  }

  return {
    async append(streamId, events, { expectedRevision = 'any' } = {}) {
      if (events.length === 0) throw new Error('append needs at least one event');
      for (let attempt = 0; ; attempt++) {
        try {
          return await appendOnce(streamId, events, expectedRevision);
        } catch (error) {
          const raced = error instanceof UniqueIntegrityConstraintViolationError;
          if (!raced && !(error instanceof WrongExpectedRevisionError)) throw error;
          // A retry of an append that already happened (same event ids) succeeds again.
          const earlier = await findIdempotentAppend(streamId, events);
          if (earlier) return earlier;
          if (raced && expectedRevision === 'any' && attempt < 3) continue; // lost a race creating the stream
          if (raced) {
            const now = await pool.maybeOneFirst(sql.type(z.object({ revision: z.number() }))`
              select revision from es_streams where stream_id = ${streamId}
            `);
            throw new WrongExpectedRevisionError(streamId, String(expectedRevision), now ?? 'no_stream');
          }
          throw error;
        }
      }
    },

    async readStream(streamId, { fromRevision = 0, maxCount = 1_000_000 } = {}) {
      const rows = await pool.any(sql.type(eventRow)`
        select ${eventColumns} from es_events
        where stream_id = ${streamId} and revision >= ${fromRevision}
        order by revision limit ${maxCount}
      `);
      return rows.map(toRecorded);
    },

    readAll,

    async *subscribeToAll(opts: SubscribeOptions = {}) {
      const { signal, pollIntervalMs = 250 } = opts;
      let after = opts.after ?? START;
      const unsubscribe = await wakeups.subscribe();
      try {
        while (!signal?.aborted) {
          const seen = wakeups.generation();
          const page = await readAll({ ...opts, after });
          if (page.events.length > 0 || page.checkpoint !== after) {
            after = page.checkpoint;
            yield page;
            continue;
          }
          await wakeups.next(seen, pollIntervalMs, signal);
        }
      } finally {
        unsubscribe();
      }
    },

    async headPosition() {
      const row = await pool.maybeOne(sql.type(positionRow)`
        select transaction_id::text as commit, position as prepare from es_events
        order by transaction_id desc, position desc limit 1
      `);
      return row ? toPosition(row) : START;
    },

    async ping() {
      await pool.oneFirst(sql.type(z.object({ ok: z.number() }))`select 1 as ok`);
    },

    async close() {
      await wakeups.close();
    },
  };
}

/**
 * One LISTEN connection per store, shared by all live subscriptions. Notifications only cut a
 * wait short; every wait is bounded, so a lost connection costs latency, never events.
 */
function createWakeups(listenUrl: string | undefined) {
  let client: pg.Client | undefined;
  let connecting: Promise<void> | undefined;
  let users = 0;
  let closed = false;
  const waiters = new Set<() => void>();
  let notifications = 0;

  const wakeAll = () => {
    notifications++;
    for (const wake of waiters) wake();
    waiters.clear();
  };

  const connect = async () => {
    if (!listenUrl || closed) return;
    const c = new pg.Client({ connectionString: listenUrl });
    c.on('notification', wakeAll);
    c.on('error', () => {
      client = undefined;
      c.end().catch(() => undefined);
      wakeAll();
    });
    try {
      await c.connect();
      await c.query(`listen ${NOTIFY_CHANNEL}`);
      client = c;
    } catch {
      await c.end().catch(() => undefined);
    }
  };

  return {
    async subscribe() {
      users++;
      if (!client && !connecting) connecting = connect().finally(() => (connecting = undefined));
      await connecting;
      return () => {
        users--;
        if (users === 0 && client) {
          const c = client;
          client = undefined;
          void c.end().catch(() => undefined);
        }
      };
    },
    /** Counts notifications: read it before a read, hand it to `next` after an empty one. */
    generation: () => notifications,
    /**
     * Resolves at once if a notification came since `seen`, else on the next one, after
     * `timeoutMs`, or on abort, whichever is first.
     */
    next(seen: number, timeoutMs: number, signal?: AbortSignal): Promise<void> {
      if (notifications !== seen || signal?.aborted) return Promise.resolve();
      if (!client && !connecting && users > 0 && !closed) {
        connecting = connect().finally(() => (connecting = undefined));
      }
      return new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', done);
          waiters.delete(done);
          resolve();
        };
        const timer = setTimeout(done, timeoutMs);
        signal?.addEventListener('abort', done, { once: true });
        waiters.add(done);
      });
    },
    async close() {
      closed = true;
      wakeAll();
      const c = client;
      client = undefined;
      await c?.end().catch(() => undefined);
    },
  };
}
