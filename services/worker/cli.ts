import type { Config } from '../../shared/config.ts';
import { connectQueueRedis, createReplayQueue, enqueueReplay, listReplayJobs, waitForReplayJob, type ReplayJobView } from './queue.ts';

/** The ops CLI's side of the replay queue: `projections replay <name> --queue [--wait]` and the job table of `projections status`. */
async function withQueue<T>(
  config: Pick<Config, 'REDIS_URL' | 'QUEUE_PREFIX'>,
  work: (queue: ReturnType<typeof createReplayQueue>) => Promise<T>,
): Promise<T> {
  if (!config.REDIS_URL) throw new Error('queued replays need REDIS_URL (the worker consumes the queue from Redis)');
  const connection = connectQueueRedis(config.REDIS_URL);
  const queue = createReplayQueue(connection, { prefix: config.QUEUE_PREFIX });
  try {
    return await work(queue);
  } finally {
    await queue.close();
    connection.disconnect();
  }
}

export async function enqueueReplayFromCli(
  config: Pick<Config, 'REDIS_URL' | 'QUEUE_PREFIX'>,
  projection: string,
  options: { wait?: boolean; timeoutMs?: number; out?: NodeJS.WritableStream } = {},
): Promise<ReplayJobView | string> {
  const out = options.out ?? process.stdout;
  return withQueue(config, async (queue) => {
    const id = await enqueueReplay(queue, projection);
    out.write(`queued replay of ${projection}: job ${id} (a worker process runs it; follow with \`projections status\`)\n`);
    if (!options.wait) return id;
    let last = -1;
    const job = await waitForReplayJob(queue, id, options.timeoutMs ?? 24 * 3_600_000, (p) => {
      if (p.percent === last) return;
      last = p.percent;
      out.write(`  ${projection}: ${p.percent}% (${p.processed} events, at ${p.position} of ${p.head})\n`);
    });
    out.write(`job ${id} ${job.state}${job.failedReason ? `: ${job.failedReason}` : ''}\n`);
    if (job.state !== 'completed') process.exitCode = 1;
    return job;
  });
}

/** The newest replay jobs, or nothing when no Redis is configured (replays then run in the CLI). */
export async function replayJobsForStatus(config: Pick<Config, 'REDIS_URL' | 'QUEUE_PREFIX'>): Promise<ReplayJobView[]> {
  if (!config.REDIS_URL) return [];
  return withQueue(config, (queue) => listReplayJobs(queue, 10));
}

export const replayJobRow = (job: ReplayJobView) => ({
  job: job.id,
  projection: job.projection,
  state: job.state,
  progress: job.progress ? `${job.progress.percent}% (${job.progress.processed} events)` : '',
  attempts: job.attempts,
  createdAt: job.createdAt,
  finishedAt: job.finishedAt ?? '',
  error: job.failedReason ?? '',
});
