import { z } from 'zod';
import { connectionUrlOf, sql, type DatabasePool } from '../../db/pool.ts';
import { createPlainConnection } from '../../db/plainConnection.ts';
import { assertAppendEvents, assertAppendManyRequests, START, type EventStore, type SubscribeOptions } from '../port.ts';
import { readAllBulk } from './bulkRead.ts';
import { createFlush } from './flush.ts';
import { createGroupCommit } from './groupCommit.ts';
import { createReadPage } from './readPage.ts';
import { eventColumns, eventRow, horizonQuery, positionRow, toPosition, toRecorded } from './rows.ts';
import { createSharedTails } from './sharedTail.ts';
import { createWakeups, NOTIFY_STATEMENT } from './wakeups.ts';
import { createWakeupSchedule } from './wakeupSchedule.ts';

export type PostgresEventStoreOptions = {
  /** Connection string for the LISTEN connection that wakes live subscriptions. */
  readonly listenUrl?: string;
  /** How many log entries a filtered read scans at most before it returns a checkpoint. */
  readonly scanWindow?: number;
  /** Group commit: most events one flush carries (a larger single request goes alone). */
  readonly maxBatchEvents?: number;
  /** Group commit: flushes in flight at once from this store (each holds one connection). */
  readonly maxConcurrentFlushes?: number;
  /**
   * Live readers are woken by a NOTIFY in a flush's own transaction when the last wake-up is at
   * least this old, else by one sent on its own at most this long after the last (5 ms).
   */
  readonly wakeIntervalMs?: number;
};

const pingRow = z.object({ ok: z.number() });

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
 *
 * Appends queue for group commit (groupCommit.ts): one flush (flush.ts) sends every queued
 * request to `es_append_batch` in one statement and one transaction, on a connection of its own.
 * A page of the log is one call of `es_read_page` (readPage.ts), which takes the horizon and
 * reads below it; rebuilds read in bulk below one fixed horizon (bulkRead.ts). Live subscribers
 * of one process share their reads at the head (sharedTail.ts) and wait on one LISTEN
 * connection (wakeups.ts) for the NOTIFY that flushes carry (wakeupSchedule.ts). The SQL
 * functions are in migrations/; why the horizon and the flush are built this way, with
 * measurements: docs/decisions/001-read-horizon.md, 002-group-commit-and-batch-append.md.
 */
export function createPostgresEventStore(pool: DatabasePool, options: PostgresEventStoreOptions = {}): EventStore {
  const scanWindow = options.scanWindow ?? 10_000;
  const url = connectionUrlOf(pool);
  if (url === undefined)
    throw new Error('createPostgresEventStore: the pool must come from createDatabasePool (its URL opens the append connections)');
  const wakeups = createWakeups(options.listenUrl);
  const maxConcurrentFlushes = options.maxConcurrentFlushes ?? 1;

  // The group commit's flushes run on plain pg connections of their own, one per flush in
  // flight, with `es_append_batch` prepared: through slonik's pool each flush cost a connection
  // checkout, interceptors and statement parsing on both ends, work that a lone flush in flight
  // does serially with PostgreSQL's.
  const flushConnections = Array.from({ length: maxConcurrentFlushes }, () =>
    createPlainConnection(url, { applicationName: 'event-store-append' }),
  );
  // Wake-ups need no durability: their own connection commits without waiting for the WAL
  // flush (pg_notify draws a transaction id, so its commit would otherwise wait for an fsync).
  const notifyConnection = createPlainConnection(url, { applicationName: 'event-store-notify', settings: { synchronous_commit: 'off' } });

  const groupCommit = createGroupCommit((requests, lane) => flush(requests, lane), {
    maxBatchEvents: options.maxBatchEvents ?? 2_000,
    maxConcurrentFlushes,
  });

  // Wakes live subscribers (this process's and others'). Only latency depends on it; they also poll.
  const wakeSchedule = createWakeupSchedule(
    () =>
      notifyConnection
        .get()
        .then((client) => client.query({ name: 'es_notify', text: NOTIFY_STATEMENT }))
        .then(() => undefined),
    options.wakeIntervalMs ?? 5,
  );

  const flush = createFlush(flushConnections, wakeSchedule);
  const readAll = createReadPage(pool, scanWindow);
  // Live subscriptions of this process share their reads at the head (sharedTail.ts); `readAll`
  // itself always reads afresh.
  const tails = createSharedTails(readAll, wakeups);

  return {
    async append(streamId, events, { expectedRevision = 'any' } = {}) {
      assertAppendEvents(events);
      const [result] = await groupCommit.submit([{ streamId, events, expectedRevision }]);
      if (!result) throw new Error('append returned no result');
      return result;
    },

    async appendMany(requests) {
      assertAppendManyRequests(requests);
      return groupCommit.submit(requests);
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

    // On a plain pg connection of its own (see bulkRead.ts).
    readAllBulk: (opts = {}) => readAllBulk(pool, url, horizonQuery, opts),

    async *subscribeToAll(opts: SubscribeOptions = {}) {
      const unsubscribe = await wakeups.subscribe();
      try {
        yield* tails.subscribe(opts);
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
      await pool.oneFirst(sql.type(pingRow)`select 1 as ok`);
    },

    async close() {
      await groupCommit.drained();
      await wakeSchedule.close();
      await Promise.all([...flushConnections, notifyConnection].map((c) => c.end()));
      await wakeups.close();
    },
  };
}
