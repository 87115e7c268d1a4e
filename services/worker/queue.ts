import { Queue, type Job, type JobState } from 'bullmq';
import { Redis } from 'ioredis';
import { formatPosition, type GlobalPosition } from '../../shared/event-store/port.ts';

/**
 * The BullMQ queues of the service and what producers (ops CLI, gateway) need to use them.
 * The worker process consumes them (services/worker/worker.ts).
 */
export const REPLAY_QUEUE = 'projection-replay';
export const KPI_ROLLUP_QUEUE = 'kpi-rollup';

export type ReplayJobData = { readonly projection: string };
export type ReplayJobProgress = {
  readonly processed: number;
  readonly position: string;
  readonly head: string;
  /** Share of the log (by position) behind the replay, 0..100; an estimate until `done`. */
  readonly percent: number;
  readonly done: boolean;
};
export type ReplayJobResult = { readonly processed: number; readonly position: string };

export type QueueSettings = {
  /** Redis keys of every queue start with this (one prefix per deployment / test). */
  readonly prefix: string;
};

/** BullMQ needs `maxRetriesPerRequest: null` on connections its workers block on. */
export function connectQueueRedis(url: string): Redis {
  return new Redis(url, { maxRetriesPerRequest: null, enableReadyCheck: true });
}

export function createReplayQueue(connection: Redis, settings: QueueSettings): Queue<ReplayJobData, ReplayJobResult> {
  return new Queue<ReplayJobData, ReplayJobResult>(REPLAY_QUEUE, {
    connection,
    prefix: settings.prefix,
    defaultJobOptions: { attempts: 3, backoff: { type: 'exponential', delay: 1_000 }, removeOnComplete: 100, removeOnFail: 100 },
  });
}

/** Enqueues a replay; the worker rebuilds the model into shadow tables and swaps it in. */
export async function enqueueReplay(queue: Queue<ReplayJobData, ReplayJobResult>, projection: string): Promise<string> {
  const job = await queue.add('replay', { projection });
  if (!job.id) throw new Error('BullMQ returned a job without an id');
  return job.id;
}

/** Progress along the log: `prepare` grows with every event on both adapters (the ops CLI's bar does the same). */
export function replayProgress(processed: number, position: GlobalPosition, head: GlobalPosition, done: boolean): ReplayJobProgress {
  const span = head.prepare;
  const percent = done ? 100 : span <= 0n ? 0 : Math.min(99, Math.max(0, Number((position.prepare * 100n) / span)));
  return { processed, position: formatPosition(position), head: formatPosition(head), percent, done };
}

export type ReplayJobView = {
  readonly id: string;
  readonly projection: string;
  readonly state: JobState | 'unknown';
  readonly progress: ReplayJobProgress | null;
  readonly result: ReplayJobResult | null;
  readonly failedReason: string | null;
  readonly attempts: number;
  readonly createdAt: string;
  readonly finishedAt: string | null;
};

const isProgress = (value: unknown): value is ReplayJobProgress =>
  typeof value === 'object' && value !== null && 'processed' in value && 'percent' in value;

async function view(job: Job<ReplayJobData, ReplayJobResult>, knownState?: JobState | 'unknown'): Promise<ReplayJobView> {
  return {
    id: job.id ?? '',
    projection: job.data.projection,
    state: knownState ?? (await job.getState()),
    progress: isProgress(job.progress) ? job.progress : null,
    result: job.returnvalue ?? null,
    failedReason: job.failedReason || null,
    attempts: job.attemptsMade,
    createdAt: new Date(job.timestamp).toISOString(),
    finishedAt: job.finishedOn ? new Date(job.finishedOn).toISOString() : null,
  };
}

export async function getReplayJob(queue: Queue<ReplayJobData, ReplayJobResult>, id: string): Promise<ReplayJobView | null> {
  // State first, then the job's fields: read the other way round, a job that fails in between
  // shows 'failed' with the fields (attempts, reason) of before (a flaky test caught this).
  const state = await queue.getJobState(id);
  const job = await queue.getJob(id);
  return job ? view(job, state) : null;
}

/** The newest replay jobs in any state, newest first (for `ops projections status`). */
export async function listReplayJobs(queue: Queue<ReplayJobData, ReplayJobResult>, limit = 20): Promise<ReplayJobView[]> {
  const jobs = await queue.getJobs(['active', 'waiting', 'delayed', 'prioritized', 'completed', 'failed'], 0, limit - 1, false);
  const views = await Promise.all(jobs.filter((j): j is Job<ReplayJobData, ReplayJobResult> => Boolean(j)).map((job) => view(job)));
  return views.sort((a, b) => b.createdAt.localeCompare(a.createdAt)).slice(0, limit);
}

/** Waits, bounded, until the job completed or failed; returns its last view. */
export async function waitForReplayJob(
  queue: Queue<ReplayJobData, ReplayJobResult>,
  id: string,
  timeoutMs: number,
  onProgress?: (progress: ReplayJobProgress) => void,
): Promise<ReplayJobView> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const current = await getReplayJob(queue, id);
    if (!current) throw new Error(`replay job ${id} not found`);
    if (current.progress) onProgress?.(current.progress);
    if (current.state === 'completed' || current.state === 'failed' || Date.now() >= deadline) return current;
    await new Promise((r) => setTimeout(r, 100));
  }
}
