import { allProjections } from '../projectors.ts';
import { startGatewayRole } from './gateway.ts';
import { startProjectors } from './projector.ts';
import type { RoleContext, RoleHandle } from './process.ts';
import { startWebhookDelivery } from './webhooks.ts';

/**
 * `npm start` with no role: every part in one process (the embedded default when no URLs are
 * set). The BullMQ worker joins only when REDIS_URL is set; without Redis, replays run from
 * the ops CLI directly and webhooks are delivered in this process.
 */
export async function startAllRole(context: RoleContext): Promise<RoleHandle> {
  const projectors = await startProjectors(context, { projections: allProjections, usageConsumer: true });
  // BullMQ (and its Redis client) load only when Redis is configured.
  const workers = context.config.REDIS_URL
    ? await (await import('./worker.ts')).startWorkers(context)
    : await startWebhookDelivery(context);
  const gateway = await startGatewayRole(context);
  return {
    async close() {
      await gateway.close();
      await projectors.close();
      await workers?.close();
    },
  };
}
