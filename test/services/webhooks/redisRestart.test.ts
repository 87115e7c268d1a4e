import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authHeaders } from '../../support/auth.ts';
import { freePort, startRedisServer, stopProcess } from '../../support/processes.ts';
import { createChangesHarness, hire, type ChangesHarness } from '../../support/harness/changes.ts';
import { waitFor } from '../../support/waitFor.ts';
import { webhooksCapability } from '../../../services/webhooks/capability.ts';
import { startWebhookDispatcher, type WebhookDispatcher } from '../../../services/webhooks/dispatcher.ts';
import { createSecretBox } from '../../../services/webhooks/secrets.ts';
import { firstArrivals, startReceiver } from '../../support/webhooks/receiver.ts';

const secrets = createSecretBox(randomBytes(32));
let h: ChangesHarness;
/**
 * Our own redis-server on a free port (never the shared one on 6379): killed while deliveries
 * are in flight and started again empty, as after a crash without persistence.
 */
let port: number;
let redis: ChildProcess | undefined;
let dispatcher: WebhookDispatcher | undefined;

beforeAll(async () => {
  h = await createChangesHarness((db) => webhooksCapability({ pool: db.pool, secrets, targets: { allowHosts: ['127.0.0.1'] } }));
  port = await freePort();
  redis = await startRedisServer(port);
});
afterAll(async () => {
  await dispatcher?.close();
  if (redis) await stopProcess(redis);
  await h?.close();
});

describe('when Redis dies mid-delivery and comes back empty', () => {
  it('every change still reaches the receiver, in order (the cursor lives in PostgreSQL)', async () => {
    dispatcher = await startWebhookDispatcher({
      pool: h.db.pool,
      databaseUrl: h.db.url,
      redisUrl: `redis://127.0.0.1:${port}`,
      prefix: 'test-wh-restart',
      secrets,
      targets: { allowHosts: ['127.0.0.1'] },
      retry: { scheduleMs: [100, 200, 400, 400, 400, 400, 400, 400], jitter: 0.2, maxRetryAfterMs: 1_000 },
      timeoutMs: 2_000,
      sweepEveryMs: 200,
      batchPerJob: 2, // many short jobs, so the outage surely hits some
    });
    const { tenant } = await h.tenant();
    const headers = await authHeaders(h.auth, tenant, 'admin');
    // A slow receiver: deliveries are in flight when Redis goes away.
    const receiver = await startReceiver(undefined, { delayMs: 40 });
    try {
      const created = await h.app.inject({
        method: 'POST',
        url: '/v1/webhooks',
        headers,
        payload: { url: receiver.url, events: ['employee.hired', 'employee.details_changed'] },
      });
      expect(created.statusCode).toBe(201);
      const TOTAL = 40;
      const e = await hire(h.store, tenant.tenantId, 'redis');
      for (let i = 1; i < TOTAL; i++) await e.rename(`redis-${i}`);
      const expected = await h.feedCursors(headers, TOTAL);

      await waitFor(() => receiver.acknowledged().length >= 5);
      if (!redis) throw new Error('redis not started');
      await stopProcess(redis);
      const atOutage = receiver.acknowledged().length;
      redis = await startRedisServer(port);

      await waitFor(() => new Set(receiver.acknowledged()).size >= TOTAL, 30_000);
      const { order, regressions } = firstArrivals(receiver.acknowledged());
      expect(order).toEqual(expected);
      expect(regressions).toBe(0);
      expect(atOutage).toBeLessThan(TOTAL - 10); // the outage did happen mid-stream
    } finally {
      await receiver.close();
    }
  }, 60_000);
});
