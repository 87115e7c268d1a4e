import { allProjections } from '../../projections/index.ts';
import { connectQueueRedis } from '../worker/queue.ts';
import { startWorker } from '../worker/worker.ts';
import { createKpiRollupJob } from '../../projections/kpi/retention.ts';
import { startWebhookDispatcher } from '../webhooks/dispatcher.ts';
import { DEFAULT_RETRY_POLICY } from '../webhooks/schedule.ts';
import { loadSecretBox } from '../webhooks/secrets.ts';
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
  // Webhook deliveries (SPEC §7): BullMQ jobs triggered from PostgreSQL state.
  const webhooks = await startWebhookDispatcher({
    pool: runtime.pool,
    databaseUrl: runtime.databaseUrl,
    redisUrl: config.REDIS_URL,
    prefix: config.QUEUE_PREFIX,
    secrets: await loadSecretBox(config),
    targets: { allowHosts: config.WEBHOOK_ALLOW_HOSTS },
    retry: config.WEBHOOK_RETRY_SCHEDULE_MS ? { ...DEFAULT_RETRY_POLICY, scheduleMs: config.WEBHOOK_RETRY_SCHEDULE_MS } : DEFAULT_RETRY_POLICY,
    timeoutMs: config.WEBHOOK_TIMEOUT_MS,
    deliveryRetentionMs: config.WEBHOOK_DELIVERY_RETENTION_DAYS * 86_400_000,
    logger,
  });
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
