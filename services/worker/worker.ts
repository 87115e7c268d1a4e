import { Queue, UnrecoverableError, Worker, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { DatabasePool } from '../../shared/db/pool.ts';
import { comparePositions, formatPosition, type EventStore } from '../../shared/event-store/port.ts';
import type { Logger } from '../../shared/logger.ts';
import type { Projection } from '../../shared/projections/projection.ts';
import { replayProjection } from '../../shared/projections/replay.ts';
import { KPI_ROLLUP_QUEUE, REPLAY_QUEUE, replayProgress, type QueueSettings, type ReplayJobData, type ReplayJobResult } from './queue.ts';

/** The scheduled KPI job: compacts old fine-grained rollups; returns what it did (logged). */
export type KpiRollupJob = (now: Date) => Promise<Record<string, unknown>>;

export type WorkerDependencies = QueueSettings & {
  readonly pool: DatabasePool;
  readonly eventStore: EventStore;
  readonly projections: readonly Projection[];
  readonly connection: Redis;
  readonly logger: Logger;
  /** Absent: no KPI job is scheduled (and a stale schedule is removed). */
  readonly kpiRollup?: KpiRollupJob;
  readonly kpiRollupEveryMs?: number;
  /** How often a replay reports progress to Redis at most. */
  readonly progressEveryMs?: number;
};

export type WorkerHandle = { close(): Promise<void> };

const KPI_SCHEDULER_ID = 'kpi-rollup-every';

/**
 * The worker role: BullMQ consumers for projection replays (one at a time: a replay reads the
 * whole log) and the repeatable KPI rollup job. Several worker processes may run; BullMQ hands
 * each job to one of them, and the scheduler is an upsert, so starting twice schedules once.
 */
export async function startWorker(deps: WorkerDependencies): Promise<WorkerHandle> {
  const { pool, eventStore, connection, logger, prefix } = deps;
  const byName = new Map(deps.projections.map((p) => [p.name, p]));
  const progressEveryMs = deps.progressEveryMs ?? 250;

  const replay = async (job: Job<ReplayJobData, ReplayJobResult>): Promise<ReplayJobResult> => {
    const projection = byName.get(job.data.projection);
    if (!projection) throw new UnrecoverableError(`unknown projection ${job.data.projection}; known: ${[...byName.keys()].join(', ')}`);
    logger.info({ jobId: job.id, projection: projection.name }, 'replay started');
    let reported = 0;
    const result = await replayProjection(pool, eventStore, projection, {
      onProgress: ({ processed, position, head }) => {
        const done = comparePositions(position, head) >= 0;
        if (!done && Date.now() - reported < progressEveryMs) return;
        reported = Date.now();
        void job.updateProgress(replayProgress(processed, position, head, done)).catch(() => undefined);
      },
    });
    await job.updateProgress(replayProgress(result.processed, result.position, result.position, true));
    logger.info({ jobId: job.id, projection: projection.name, processed: result.processed }, 'replay swapped in');
    return { processed: result.processed, position: formatPosition(result.position) };
  };

  const replayWorker = new Worker<ReplayJobData, ReplayJobResult>(REPLAY_QUEUE, replay, { connection, prefix, concurrency: 1 });
  replayWorker.on('failed', (job, error) => logger.error({ err: error, jobId: job?.id }, 'replay job failed'));

  const kpiQueue = new Queue(KPI_ROLLUP_QUEUE, { connection, prefix });
  let kpiWorker: Worker | undefined;
  if (deps.kpiRollup) {
    const rollup = deps.kpiRollup;
    await kpiQueue.upsertJobScheduler(
      KPI_SCHEDULER_ID,
      { every: deps.kpiRollupEveryMs ?? 5 * 60_000 },
      { name: 'kpi-rollup', data: {}, opts: { removeOnComplete: 50, removeOnFail: 50 } },
    );
    kpiWorker = new Worker(
      KPI_ROLLUP_QUEUE,
      async (job) => {
        const outcome = await rollup(new Date());
        logger.info({ jobId: job.id, ...outcome }, 'kpi rollup done');
        return outcome;
      },
      { connection, prefix, concurrency: 1 },
    );
    kpiWorker.on('failed', (job, error) => logger.error({ err: error, jobId: job?.id }, 'kpi rollup failed'));
  } else {
    await kpiQueue.removeJobScheduler(KPI_SCHEDULER_ID);
  }

  await replayWorker.waitUntilReady();
  await kpiWorker?.waitUntilReady();

  return {
    async close() {
      // Lets an active replay finish its current step; an interrupted one is retried elsewhere.
      await Promise.all([replayWorker.close(), kpiWorker?.close()]);
      await kpiQueue.close();
    },
  };
}
