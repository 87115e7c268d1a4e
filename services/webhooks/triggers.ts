import type { Logger } from '../../shared/logger.ts';

/** "Drain endpoint E": deliver its next changes, in order, under its lease. */
export type DrainJob = { readonly endpointId: string; readonly tenantId: string };

/** A job of the sweep, with the endpoint's state as the sweep found it (lease end, cursor). */
export type SweptJob = { readonly job: DrainJob; readonly stateSeen: string };

/**
 * A sweep finds a due endpoint again on every pass until its drain runs, so its job is
 * deduplicated (BullMQ `deduplication`, kept while the job waits or runs): one per endpoint and
 * state seen. The state (the end of a lease that ran out, the cursor) is in the id so that a job
 * left active by a worker that died holding the lease does not block the endpoint once that
 * lease runs out, nor, once anything was delivered since, ever again. (A worker that died
 * between taking the job and the lease leaves the endpoint waiting for BullMQ's stalled-job
 * check, about 30 s.) A sweep that finds the endpoint while its job runs adds nothing, which
 * loses nothing: the drain looks for more after releasing the lease and adds a plain job. Only
 * the sweep's jobs are deduplicated: that follow-up and the delayed retries are never dropped.
 */
const sweepDeduplication = ({ job, stateSeen }: SweptJob) => ({ deduplication: { id: `drain-${job.endpointId}-${stateSeen}` } });

export type DrainTriggers = {
  add(job: DrainJob, options?: { readonly delayMs?: number; readonly jobId?: string }): Promise<void>;
  /** The sweep's jobs (deduplicated by the state seen where the queue can, see above). */
  addBulk(swept: readonly SweptJob[]): Promise<void>;
  close(): Promise<void>;
};

export type TriggerOptions = {
  /** Drains running at once, across endpoints. */
  readonly concurrency: number;
  readonly logger?: Pick<Logger, 'error'>;
};

/**
 * Triggers in this process, for the all-in-one process without Redis (the embedded default):
 * delayed drains are timers, and at most `concurrency` drains run at once. A drain asked for an
 * endpoint that is already draining here runs once more after it (what came meanwhile is
 * delivered promptly), never twice at once, and behind the endpoints waiting for a slot. Timers
 * die with the process; the sweep finds the endpoints again from PostgreSQL (`next_attempt_at`).
 */
export function inProcessTriggers(drain: (job: DrainJob) => Promise<void>, options: TriggerOptions): DrainTriggers {
  const running = new Map<string, { again: boolean }>();
  const waiting = new Map<string, DrainJob>();
  const timers = new Set<NodeJS.Timeout>();
  const active = new Set<Promise<void>>();
  let closed = false;

  const start = (job: DrainJob): void => {
    const run = { again: false };
    running.set(job.endpointId, run);
    const done = (async () => {
      do {
        run.again = false;
        await drain(job).catch((error: unknown) =>
          options.logger?.error({ err: error, endpointId: job.endpointId }, 'webhook drain failed'),
        );
        // Owed another run: at once while nobody waits; else behind those who do (as BullMQ
        // queues a new job), so an endpoint with a long backlog does not keep its slot.
      } while (run.again && !closed && waiting.size === 0);
    })().finally(() => {
      running.delete(job.endpointId);
      active.delete(done);
      if (run.again && !closed) waiting.set(job.endpointId, job);
      next();
    });
    active.add(done);
  };

  const next = (): void => {
    for (const [endpointId, job] of waiting) {
      if (closed || running.size >= options.concurrency) return;
      waiting.delete(endpointId);
      start(job);
    }
  };

  const trigger = (job: DrainJob): void => {
    if (closed) return;
    const run = running.get(job.endpointId);
    if (run) run.again = true;
    else if (running.size < options.concurrency) start(job);
    else waiting.set(job.endpointId, job);
  };

  return {
    async add(job, addOptions = {}) {
      const delayMs = addOptions.delayMs ?? 0;
      if (closed || delayMs <= 0) return trigger(job);
      // (A timer holds at most 2^31 - 1 ms, 24.8 days; a longer wait is the sweep's to find.)
      const timer = setTimeout(
        () => {
          timers.delete(timer);
          trigger(job);
        },
        Math.min(delayMs, 2 ** 31 - 1),
      );
      timer.unref();
      timers.add(timer);
    },
    async addBulk(swept) {
      for (const { job } of swept) trigger(job);
    },
    async close() {
      closed = true;
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      waiting.clear();
      await Promise.all(active);
    },
  };
}

/**
 * Triggers as BullMQ jobs in Redis (queue `webhook-delivery`), shared by every worker process:
 * BullMQ hands each job to one worker, and a retry is a delayed job. Loaded only when Redis is
 * configured.
 */
export async function bullmqTriggers(
  drain: (job: DrainJob) => Promise<void>,
  options: TriggerOptions & { readonly redisUrl: string; readonly prefix: string; readonly queueName: string },
): Promise<DrainTriggers> {
  const [{ Queue, Worker }, { Redis }] = await Promise.all([import('bullmq'), import('ioredis')]);
  const quiet = () => undefined;
  // Workers block on their connection (BullMQ wants maxRetriesPerRequest: null); producers fail
  // fast instead, so a sweep during a Redis outage errors out and the next one tries again.
  const workerConnection = new Redis(options.redisUrl, { maxRetriesPerRequest: null });
  const queueConnection = new Redis(options.redisUrl, { maxRetriesPerRequest: 1 });
  workerConnection.on('error', quiet);
  queueConnection.on('error', quiet);
  const queue = new Queue<DrainJob>(options.queueName, {
    connection: queueConnection,
    prefix: options.prefix,
    defaultJobOptions: { removeOnComplete: true, removeOnFail: 1000, attempts: 1 },
  });
  queue.on('error', quiet);
  const worker = new Worker<DrainJob>(options.queueName, (job) => drain(job.data), {
    connection: workerConnection,
    prefix: options.prefix,
    concurrency: options.concurrency,
  });
  worker.on('error', quiet);
  worker.on('failed', (job, error) => options.logger?.error({ err: error, endpointId: job?.data.endpointId }, 'webhook drain job failed'));
  await worker.waitUntilReady().catch(quiet);
  return {
    async add(job, addOptions = {}) {
      const { delayMs = 0, jobId } = addOptions;
      await queue.add('drain', job, { ...(delayMs > 0 && { delay: delayMs }), ...(jobId && { jobId }) });
    },
    async addBulk(swept) {
      if (swept.length > 0) await queue.addBulk(swept.map((s) => ({ name: 'drain', data: s.job, opts: sweepDeduplication(s) })));
    },
    async close() {
      await worker.close();
      await queue.close();
      workerConnection.disconnect();
      queueConnection.disconnect();
    },
  };
}
