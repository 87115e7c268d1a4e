import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authHeaders } from '../../support/auth.ts';
import { staysTrue } from '../../support/staysTrue.ts';
import { sqlAt } from '../../support/database.ts';
import { stopProcess, untilPrinted } from '../../support/processes.ts';
import { createChangesHarness, hire, type ChangesHarness } from '../../support/harness/changes.ts';
import { waitFor } from '../../support/waitFor.ts';
import { webhooksCapability } from '../../../services/webhooks/capability.ts';
import { startWebhookDispatcher, WEBHOOK_QUEUE, type WebhookDispatcher } from '../../../services/webhooks/dispatcher.ts';
import { createSecretBox } from '../../../services/webhooks/secrets.ts';
import { recordAttempt, recordDelivered } from '../../../services/webhooks/deliveryLog.ts';
import { acquireLease, releaseLease } from '../../../services/webhooks/lease.ts';
import { firstArrivals, startReceiver } from '../../support/webhooks/receiver.ts';

/**
 * A worker killed mid-delivery (SIGKILL, so it releases nothing): its endpoint stays leased to
 * it, nobody else delivers meanwhile, and once the lease runs out another worker takes the
 * endpoint over and delivers from the cursor, the change in flight again with the same
 * `webhook-id`. The dead worker's token moves nothing afterwards.
 */
const key = randomBytes(32);
const secrets = createSecretBox(key);
const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const prefix = `test-wh-lease-${randomBytes(4).toString('hex')}`;
let h: ChangesHarness;
let child: ChildProcess | undefined;
let survivor: WebhookDispatcher | undefined;
let redis: Redis;

async function startChildWorker(databaseUrl: string): Promise<ChildProcess> {
  const worker = spawn(process.execPath, [resolve(import.meta.dirname, '../../support/webhooks/dispatcherChild.ts')], {
    env: { ...process.env, DATABASE_URL: databaseUrl, REDIS_URL: redisUrl, QUEUE_PREFIX: prefix, SECRETS_KEY: key.toString('hex') },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await untilPrinted(worker, 'ready\n', 'the webhook worker', 60_000);
  return worker;
}

beforeAll(async () => {
  redis = new Redis(redisUrl, { maxRetriesPerRequest: null });
  h = await createChangesHarness((db) => webhooksCapability({ pool: db.pool, secrets, targets: { allowHosts: ['127.0.0.1'] } }));
});
afterAll(async () => {
  if (child) await stopProcess(child);
  await survivor?.close();
  // The dead worker's job is still marked active in Redis: remove this test's keys.
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length > 0) await redis.del(...keys);
  redis.disconnect();
  await h?.close();
});

describe('when a webhook worker is killed mid-delivery', () => {
  it('another worker takes the endpoint over once its lease runs out, and delivers every change in order', async () => {
    child = await startChildWorker(h.db.url);
    const { tenant } = await h.tenant();
    const headers = await authHeaders(h.auth, tenant, 'admin');
    // The first request is held until the worker that sent it is dead.
    const receiver = await startReceiver(() => ({ status: 500 }), { delayMs: 10_000 });
    try {
      const created = await h.app.inject({
        method: 'POST',
        url: '/v1/webhooks',
        headers,
        payload: { url: receiver.url, events: ['employee.hired', 'employee.details_changed'] },
      });
      expect(created.statusCode).toBe(201);
      const endpointId = created.json<{ id: string }>().id;
      const e = await hire(h.store, tenant.tenantId, 'lease');
      for (let i = 1; i < 5; i++) await e.rename(`lease-${i}`);
      const cursors = await h.feedCursors(headers, 5);

      await waitFor(() => receiver.requests.length === 1);
      const endpointRow = async () =>
        (
          await sqlAt<{ lease_token: string | null; lease_left_s: number | null; cursor_commit: string; cursor_prepare: string }>(
            h.db.url,
            'select lease_token::text, extract(epoch from lease_until - now())::float8 as lease_left_s, cursor_commit::text, cursor_prepare::text from webhook_endpoints where id = $1',
            [endpointId],
          )
        )[0];
      const held = await endpointRow();
      if (!held?.lease_token) throw new Error('the endpoint is not leased while its delivery is in flight');
      const deadToken = held.lease_token;
      // The dead worker's lease: twice its 60-s timeout (the host's look-up, the request) + 30 s,
      // taken a moment ago.
      expect(held.lease_left_s).toBeGreaterThan(145);
      expect(held.lease_left_s).toBeLessThanOrEqual(150);
      if (!child) throw new Error('no worker');
      await stopProcess(child);
      child = undefined;

      receiver.setDelay(0);
      receiver.setAnswer(() => ({ status: 204 }));
      survivor = await startWebhookDispatcher({
        pool: h.db.pool,
        databaseUrl: h.db.url,
        redisUrl,
        prefix,
        secrets,
        targets: { allowHosts: ['127.0.0.1'] },
        timeoutMs: 2_000,
        sweepEveryMs: 100,
      });
      // While the lease holds, nobody delivers to the endpoint, even with its worker gone: the
      // survivor's sweeps (every 100 ms) pass it over, and a drain job that reaches the survivor
      // anyway (as a stalled job re-queued, or a retry, would) cannot take the lease.
      expect(await acquireLease(h.db.pool, tenant.tenantId, endpointId, randomUUID(), 2_000)).toBeNull();
      const queue = new Queue(WEBHOOK_QUEUE, { connection: redis, prefix });
      try {
        const job = await queue.add('drain', { endpointId, tenantId: tenant.tenantId });
        await waitFor(async () => (await job.getState()) === 'completed');
      } finally {
        await queue.close();
      }
      expect(await staysTrue(() => receiver.requests.length === 1, 500)).toBe(true); // nobody delivers while the lease holds
      expect((await endpointRow())?.lease_token).toBe(deadToken);

      // The lease runs out (moved to its end rather than waited for: 90 s).
      await sqlAt(h.db.url, `update webhook_endpoints set lease_until = now() - interval '1 millisecond' where id = $1`, [endpointId]);
      await waitFor(() => new Set(receiver.acknowledged()).size >= cursors.length);
      // The change in flight came again with the same webhook-id, and then the rest, in order.
      expect(receiver.requests[0]?.id).toBe(cursors[0]);
      expect(receiver.requests[1]?.id).toBe(cursors[0]);
      const { order, regressions } = firstArrivals(receiver.acknowledged());
      expect(order).toEqual(cursors);
      expect(regressions).toBe(0);

      // The survivor recorded every change once, moved the cursor to the last and let the lease go.
      const [last] = await sqlAt<{ commit: string; prepare: string }>(
        h.db.url,
        'select commit_position::text as commit, prepare_position::text as prepare from employee_changes where tenant_id = $1 order by commit_position desc, prepare_position desc limit 1',
        [tenant.tenantId],
      );
      const done = await waitFor(async () => {
        const row = await endpointRow();
        return row?.lease_token === null && row.cursor_commit === last?.commit && row.cursor_prepare === last.prepare ? row : undefined;
      });
      const deliveries = () =>
        sqlAt<{ status: string; attempts: number }>(
          h.db.url,
          'select status, attempts from webhook_deliveries where endpoint_id = $1 order by commit_position, prepare_position',
          [endpointId],
        );
      expect(await deliveries()).toEqual(cursors.map(() => ({ status: 'succeeded', attempts: 1 })));

      // A worker that was only cut off (paused, partitioned) and comes back with the lost lease's
      // token records nothing: not while another worker holds the lease, nor once it is released.
      const stale = { position: { commit: 1n, prepare: 1n }, type: 'employee.hired' };
      const staleDelivered = () =>
        recordDelivered(
          h.db.pool,
          tenant.tenantId,
          endpointId,
          deadToken,
          [{ ...stale, statusCode: 204, at: new Date(), durationMs: 5 }],
          90_000,
          undefined,
          new Date(0),
        );
      const staleAttempt = () =>
        recordAttempt(h.db.pool, tenant.tenantId, endpointId, deadToken, {
          change: stale,
          statusCode: 500,
          error: null,
          at: new Date(),
          durationMs: 5,
          attemptsSince: new Date(0),
          outcome: { kind: 'disable', reason: 'stale' },
        });
      const other = randomUUID();
      expect(await acquireLease(h.db.pool, tenant.tenantId, endpointId, other, 10_000)).not.toBeNull();
      expect(await staleDelivered()).toBe(false);
      expect(await staleAttempt()).toBe(false);
      await releaseLease(h.db.pool, tenant.tenantId, endpointId, other);
      expect(await staleDelivered()).toBe(false);
      expect(await staleAttempt()).toBe(false);
      expect(await endpointRow()).toEqual(done);
      expect(await deliveries()).toHaveLength(cursors.length);
      const status = await sqlAt<{ status: string }>(h.db.url, 'select status from webhook_endpoints where id = $1', [endpointId]);
      expect(status[0]?.status).toBe('active');
    } finally {
      await receiver.close();
    }
  }, 60_000);
});
