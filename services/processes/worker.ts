import { allProjections } from '../projectors.ts';
import { connectQueueRedis } from '../worker/queue.ts';
import { startWorker } from '../worker/worker.ts';
import { createKpiRollupJob } from '../../projections/kpi/retention.ts';
import { startWebhookDelivery } from './webhooks.ts';
import { serveHealth, type RoleContext, type RoleHandle } from './process.ts';

/** Starts the BullMQ consumers on this runtime (also used by the all-in-one role when Redis is configured). */
export async function startWorkers({ config, logger, runtime }: RoleContext): Promise<RoleHandle> {
  if (!config.REDIS_URL) throw new Error('the worker needs REDIS_URL (BullMQ queues live in Redis)');
  const connection = connectQueueRedis(config.REDIS_URL);
  const worker = await startWorker({
    pool: runtime.pool,
    eventStore: runtime.eventStore,
    projections: allProjections,
    connection,
    prefix: config.QUEUE_PREFIX,
    logger,
    // The scheduled KPI job: drops per-minute usage rollups the hourly ones already cover.
    kpiRollup: createKpiRollupJob(runtime.pool),
  });
  // Webhook deliveries: BullMQ jobs triggered from PostgreSQL state.
  const webhooks = await startWebhookDelivery({ config, logger, runtime });
  return {
    async close() {
      await webhooks.close();
      await worker.close();
      connection.disconnect();
    },
  };
}

/** `worker` as its own process: BullMQ consumers plus a health/metrics endpoint. */
export async function startWorkerRole(context: RoleContext): Promise<RoleHandle> {
  const workers = await startWorkers(context);
  const health = await serveHealth(context.runtime, context.config.HOST, context.config.PORT);
  process.stdout.write(`worker running (health: ${health.address}/health/live)\n`);
  return {
    async close() {
      await health.close();
      await workers.close();
    },
  };
}
