import pg from 'pg';
import { z } from 'zod';
import { sql, type DatabasePool } from '../db/pool.ts';
import type { Migration } from '../db/migrate.ts';
import { ConflictError, WrongExpectedRevisionError } from '../errors.ts';
import {
  START,
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
 * whose transaction commits after a later-numbered one. Readers therefore only read below a
 * horizon: the oldest transaction that is still writing to the event tables (or, when none is,
 * the next transaction id). Everything below it has committed or aborted, so nothing can later
 * appear before what has been read.
 *
 * Unlike `pg_snapshot_xmin(pg_current_snapshot())` (emmett's horizon), this only waits for
 * our own writers: that xmin is cluster-wide, so any long transaction in any database of the
 * cluster (an analyst's open psql session, a batch job) would stall every projection.
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
  { id: 'event-store/002-append-function', sql: appendFunction({ replace: false, notifyInTransaction: true }) },
  // NOTIFY inside the append serialised every commit on the notification queue's lock (about
  // a quarter of append throughput here); the adapter now notifies after commit, coalesced.
  { id: 'event-store/003-append-without-notify', sql: appendFunction({ replace: true, notifyInTransaction: false }) },
];

/** The `es_append` function; 002 created it with an in-transaction NOTIFY, 003 replaced it. */
function appendFunction(options: { replace: boolean; notifyInTransaction: boolean }): string {
  const createOrReplace = options.replace ? 'create or replace function' : 'create function';
  const notify = options.notifyInTransaction ? "        perform pg_notify('es_events', '');\n" : '';
  return `
      -- One round trip per append: lock the stream, check idempotency and the expected
      -- revision, insert, notify. The advisory lock is taken before the transaction draws an
      -- id, so ids (and thus global order) follow the per-stream lock order.
      ${createOrReplace} es_append(
        p_stream text, p_expected text, p_ids uuid[], p_types text[], p_data jsonb[], p_metadata jsonb[]
      ) returns table (outcome text, next_revision bigint, commit_position text, prepare_position bigint)
      language plpgsql as $fn$
      declare
        v_current bigint;
        v_first bigint;
        v_existing int;
        v_foreign int;
      begin
        perform pg_advisory_xact_lock(hashtextextended(p_stream, 0));
        select count(*), count(*) filter (where e.stream_id <> p_stream)
          into v_existing, v_foreign from es_events e where e.event_id = any(p_ids);
        if v_existing > 0 then
          if v_existing = cardinality(p_ids) and v_foreign = 0 then
            return query select 'duplicate', e.revision, e.transaction_id::text, e.position
              from es_events e where e.event_id = any(p_ids) order by e.revision desc limit 1;
          else
            return query select 'event_id_conflict', null::bigint, null::text, null::bigint;
          end if;
          return;
        end if;
        select s.revision into v_current from es_streams s where s.stream_id = p_stream;
        if not (p_expected = 'any'
                or (p_expected = 'no_stream' and v_current is null)
                or (p_expected = 'stream_exists' and v_current is not null)
                or (p_expected ~ '^[0-9]+$' and v_current is not null and v_current = p_expected::bigint)) then
          return query select 'wrong_expected_revision', v_current, null::text, null::bigint;
          return;
        end if;
        v_first := coalesce(v_current + 1, 0);
        insert into es_streams as s (stream_id, revision) values (p_stream, v_first + cardinality(p_ids) - 1)
          on conflict (stream_id) do update set revision = excluded.revision;
        return query
          with inserted as (
            insert into es_events (stream_id, revision, event_id, type, data, metadata)
            select p_stream, v_first + t.n - 1, t.id, t.type, t.data, coalesce(t.metadata, '{}'::jsonb)
            from unnest(p_ids, p_types, p_data, p_metadata) with ordinality as t(id, type, data, metadata, n)
            returning es_events.revision, es_events.transaction_id, es_events.position
          )
          select 'appended', i.revision, i.transaction_id::text, i.position from inserted i order by i.position desc limit 1;
${notify}      end
      $fn$;
    `;
}

const NOTIFY_CHANNEL = 'es_events';
const NOTIFY_COALESCE_MS = 2;

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

/**
 * The read horizon, taken in its own statement before the read: the smallest transaction id
 * still in flight among the backends holding a lock on the event tables, else the next id to
 * be assigned. A writer draws its id only after locking the tables, so a writer not seen here
 * will draw an id at or above the snapshot's xmax, which bounds the horizon. A writer that
 * finishes while this runs has committed before the read statement takes its snapshot.
 */
const horizonQuery = sql.type(z.object({ horizon: z.string() }))`
  select coalesce(
    (select min(x) from pg_snapshot_xip(snap.s) x
     where (x::text::bigint % 4294967296) in (
       select l2.transactionid::text::bigint
       from pg_locks l1
       join pg_locks l2 on l2.pid = l1.pid and l2.locktype = 'transactionid' and l2.mode = 'ExclusiveLock' and l2.granted
       where l1.locktype = 'relation'
         and l1.database = (select oid from pg_database where datname = current_database())
         and l1.relation in ('es_events'::regclass, 'es_streams'::regclass)
         and l1.pid <> pg_backend_pid())),
    pg_snapshot_xmax(snap.s))::text as horizon
  from (select pg_current_snapshot() as s) snap
`;

/** Rows after `after` that the reader may see: below the horizon, so no gap can fill in later. */
const visibleAfter = (after: GlobalPosition, horizon: string) => sql.fragment`
  (transaction_id, position) > (${after.commit.toString()}::xid8, ${after.prepare.toString()}::int8)
  and transaction_id < ${horizon}::xid8
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

  const appendRow = z.object({
    outcome: z.enum(['appended', 'duplicate', 'wrong_expected_revision', 'event_id_conflict']),
    next_revision: z.number().nullable(),
    commit_position: z.string().nullable(),
    prepare_position: z.number().nullable(),
  });

  // Wakes live subscribers (this process's and others') after commit, coalesced: at most one
  // NOTIFY per couple of milliseconds, however many appends finish meanwhile. Only latency
  // depends on it; subscribers also poll.
  let wakeScheduled: Promise<void> | undefined;
  const wakeSubscribers = (): void => {
    wakeScheduled ??= new Promise<void>((resolve) => setTimeout(resolve, NOTIFY_COALESCE_MS))
      .then(() => {
        wakeScheduled = undefined;
        return pool.query(sql.type(z.object({}))`select pg_notify(${NOTIFY_CHANNEL}, '')`);
      })
      .then(
        () => undefined,
        () => undefined,
      );
  };

  async function append(streamId: string, events: readonly NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
    const row = await pool.one(sql.type(appendRow)`
      select * from es_append(
        ${streamId},
        ${String(expected)},
        ${sql.array(events.map((e) => e.id), 'uuid')},
        ${sql.array(events.map((e) => e.type), 'text')},
        ${sql.array(events.map((e) => JSON.stringify(e.data)), 'jsonb')},
        ${sql.array(events.map((e) => JSON.stringify(e.metadata ?? {})), 'jsonb')}
      )
    `);
    switch (row.outcome) {
      case 'appended':
      case 'duplicate':
        if (row.outcome === 'appended') wakeSubscribers();
        if (row.next_revision === null || row.commit_position === null || row.prepare_position === null) {
          throw new Error('es_append returned no position');
        }
        return {
          nextRevision: row.next_revision,
          position: { commit: BigInt(row.commit_position), prepare: BigInt(row.prepare_position) },
        };
      case 'wrong_expected_revision':
        throw new WrongExpectedRevisionError(streamId, String(expected), row.next_revision ?? 'no_stream');
      case 'event_id_conflict':
        throw new ConflictError('Some of these event ids were already used by other events');
      default: {
        const never: never = row.outcome;
        throw new Error(`unexpected append outcome ${String(never)}`);
      }
    }
  }

  async function readAll(opts: ReadAllOptions = {}): Promise<ReadAllPage> {
    const after = opts.after ?? START;
    const maxCount = opts.maxCount ?? 1_000;
    const horizon = await pool.oneFirst(horizonQuery);
    if (!opts.eventTypes) {
      const rows = await pool.any(sql.type(eventRow)`
        select ${eventColumns} from es_events where ${visibleAfter(after, horizon)}
        order by transaction_id, position limit ${maxCount}
      `);
      const events = rows.map(toRecorded);
      return { events, checkpoint: events.at(-1)?.position ?? after };
    }
    // Filtered: first fix the end of a window of at most `scanWindow` visible entries (index
    // only), then fetch the matching events up to it. Nothing can commit inside it later.
    const windowEndRow = await pool.maybeOne(sql.type(positionRow)`
      select transaction_id::text as commit, position as prepare from (
        select transaction_id, position from es_events where ${visibleAfter(after, horizon)}
        order by transaction_id, position limit ${scanWindow}
      ) scanned order by transaction_id desc, position desc limit 1
    `);
    if (!windowEndRow) return { events: [], checkpoint: after };
    const windowEnd = toPosition(windowEndRow);
    const rows = await pool.any(sql.type(eventRow)`
      select ${eventColumns} from es_events
      where (transaction_id, position) > (${after.commit.toString()}::xid8, ${after.prepare.toString()}::int8)
        and (transaction_id, position) <= (${windowEndRow.commit}::xid8, ${windowEndRow.prepare}::int8)
        and type = any(${sql.array([...opts.eventTypes], 'text')})
      order by transaction_id, position limit ${maxCount}
    `);
    const events = rows.map(toRecorded);
    const checkpoint = events.length === maxCount ? (events.at(-1)?.position ?? windowEnd) : windowEnd;
    return { events, checkpoint };
  }

  return {
    async append(streamId, events, { expectedRevision = 'any' } = {}) {
      if (events.length === 0) throw new Error('append needs at least one event');
      return append(streamId, events, expectedRevision);
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
      await wakeScheduled;
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
