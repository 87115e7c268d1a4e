import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import pino from 'pino';
import type { Redis } from 'ioredis';
import type { Queue } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { defineProjection } from '../../../shared/projections/projection.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import {
  connectQueueRedis,
  createReplayQueue,
  enqueueReplay,
  listReplayJobs,
  waitForReplayJob,
  type ReplayJobData,
  type ReplayJobProgress,
  type ReplayJobResult,
} from '../../../services/worker/queue.ts';
import { startWorker, type WorkerHandle } from '../../../services/worker/worker.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { waitFor } from '../../support/waitFor.ts';

const totals = defineProjection({
  name: 'worker_totals',
  version: 1,
  eventTypes: ['Added'],
  tables: {
    worker_totals: (table) => [sql.fragment`create table ${table} (stream_id text primary key, total integer not null)`],
  },
  async handle(tx, events, tables) {
    for (const event of events) {
      const { n } = z.object({ n: z.number() }).parse(event.data);
      await tx.query(sql.type(z.object({}))`
        insert into ${tables.worker_totals} (stream_id, total) values (${event.streamId}, ${n})
        on conflict (stream_id) do update set total = ${tables.worker_totals}.total + excluded.total
      `);
    }
  },
});

describe('when the worker consumes its queues', () => {
  let db: TestDatabase;
  let store: EventStore;
  let redis: Redis;
  let queue: Queue<ReplayJobData, ReplayJobResult>;
  let worker: WorkerHandle;
  const prefix = `test-worker-${randomUUID().slice(0, 8)}`;
  const rollups: Date[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    store = createPostgresEventStore(db.pool);
    redis = connectQueueRedis(process.env.REDIS_URL ?? '');
    queue = createReplayQueue(redis, { prefix });
    worker = await startWorker({
      pool: db.pool,
      eventStore: store,
      projections: [totals],
      connection: redis,
      prefix,
      logger: pino({ level: 'silent' }),
      kpiRollup: async (now) => {
        rollups.push(now);
        return { compacted: 0 };
      },
      kpiRollupEveryMs: 200,
      progressEveryMs: 0,
    });
  });
  afterAll(async () => {
    await worker?.close();
    await queue?.obliterate({ force: true }).catch(() => undefined);
    await queue?.close();
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length > 0) await redis.del(...keys);
    redis?.disconnect();
    await store?.close();
    await db?.drop();
  });

  it('runs a queued replay to completion, reporting progress, and swaps the model in', async () => {
    const streams = Array.from({ length: 30 }, () => `added-${randomUUID()}`);
    for (const [i, stream] of streams.entries()) {
      await store.append(stream, [
        { id: randomUUID(), type: 'Added', data: { n: i } },
        { id: randomUUID(), type: 'Added', data: { n: 1 } },
      ]);
    }
    const seen: ReplayJobProgress[] = [];
    const id = await enqueueReplay(queue, totals.name);
    const job = await waitForReplayJob(queue, id, 20_000, (p) => seen.push(p));

    expect(job.state).toBe('completed');
    expect(job.result?.processed).toBe(60);
    expect(job.progress).toMatchObject({ processed: 60, percent: 100, done: true });
    expect(seen.length).toBeGreaterThan(0);
    const rows = await db.pool.any(
      sql.type(z.object({ stream_id: z.string(), total: z.number() }))`select stream_id, total from worker_totals`,
    );
    expect(new Map(rows.map((r) => [r.stream_id, r.total]))).toEqual(new Map(streams.map((s, i) => [s, i + 1])));
    expect((await readCheckpoint(db.pool, totals.name))?.eventsApplied).toBe(60);
    expect((await listReplayJobs(queue)).map((j) => j.id)).toContain(id);
  });

  it('fails a replay of an unknown projection at once, without retries', async () => {
    const id = await enqueueReplay(queue, 'no_such_projection');
    const job = await waitForReplayJob(queue, id, 10_000);
    expect(job.state).toBe('failed');
    expect(job.attempts).toBe(1);
    expect(job.failedReason).toMatch(/unknown projection/);
  });

  it('runs the scheduled KPI rollup repeatedly', async () => {
    await waitFor(() => rollups.length >= 2, 10_000, 'a second rollup');
  });
});
