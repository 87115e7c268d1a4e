import { startWebhookDispatcher } from '../webhooks/dispatcher.ts';
import { DEFAULT_RETRY_POLICY } from '../webhooks/schedule.ts';
import { loadSecretBox } from '../webhooks/secrets.ts';
import type { RoleContext, RoleHandle } from './process.ts';

/**
 * Webhook deliveries from PostgreSQL state: as BullMQ jobs shared by every worker when
 * REDIS_URL is set, else in this process (the all-in-one process without Redis).
 */
export async function startWebhookDelivery({ config, logger, runtime }: RoleContext): Promise<RoleHandle> {
  return startWebhookDispatcher({
    pool: runtime.pool,
    databaseUrl: runtime.databaseUrl,
    ...(config.REDIS_URL && { redisUrl: config.REDIS_URL }),
    prefix: config.QUEUE_PREFIX,
    secrets: await loadSecretBox(config),
    targets: { allowHosts: config.WEBHOOK_ALLOW_HOSTS },
    retry: config.WEBHOOK_RETRY_SCHEDULE_MS
      ? { ...DEFAULT_RETRY_POLICY, scheduleMs: config.WEBHOOK_RETRY_SCHEDULE_MS }
      : DEFAULT_RETRY_POLICY,
    timeoutMs: config.WEBHOOK_TIMEOUT_MS,
    tenantConcurrency: config.WEBHOOK_TENANT_CONCURRENCY,
    deliveryRetentionMs: config.WEBHOOK_DELIVERY_RETENTION_DAYS * 86_400_000,
    logger,
  });
}
