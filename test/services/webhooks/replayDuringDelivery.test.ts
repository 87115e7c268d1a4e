import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authHeaders } from '../../support/auth.ts';
import { staysTrue } from '../../support/staysTrue.ts';
import { createChangesHarness, hire, type ChangesHarness } from '../../support/harness/changes.ts';
import { waitFor } from '../../support/waitFor.ts';
import { START_CURSOR } from '../../../services/changes/cursor.ts';
import { webhooksCapability } from '../../../services/webhooks/capability.ts';
import { sendWebhook } from '../../../services/webhooks/deliver.ts';
import { startWebhookDispatcher } from '../../../services/webhooks/dispatcher.ts';
import { createSecretBox, generateSigningSecret } from '../../../services/webhooks/secrets.ts';
import { startReceiver } from '../../support/webhooks/receiver.ts';

/**
 * Regression: a replay during an active delivery run. The run kept sending from the old cursor
 * to the end of its page after the replay's 202, and with BullMQ a second run took the cleared
 * lease and delivered from the replay's cursor at the same time (two requests in flight,
 * interleaved). Real PostgreSQL, Redis and HTTP.
 */
const secrets = createSecretBox(randomBytes(32));
const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
let h: ChangesHarness;

beforeAll(async () => {
  h = await createChangesHarness((db) => webhooksCapability({ pool: db.pool, secrets, targets: { allowHosts: ['127.0.0.1'] } }));
});
afterAll(async () => {
  await h?.close();
});

describe.each([
  ['BullMQ on Redis', true],
  ['in-process, without Redis', false],
] as const)('when an endpoint is replayed while a run is delivering to it (%s)', (_name, withRedis) => {
  it('keeps one delivery in flight; the old run stops before the 202 and the next delivery is the first change after the replay cursor', async () => {
    const prefix = `test-wh-replay-${randomBytes(4).toString('hex')}`;
    const dispatcher = await startWebhookDispatcher({
      pool: h.db.pool,
      databaseUrl: h.db.url,
      ...(withRedis && { redisUrl }),
      prefix,
      secrets,
      targets: { allowHosts: ['127.0.0.1'] },
      timeoutMs: 2_000,
      sweepEveryMs: 50, // with Redis, a sweep that sees the lease gone queues a job for a free slot
      concurrency: 4,
    });
    const receiver = await startReceiver(undefined, { delayMs: 200 });
    const arrivals = () => receiver.requests.map((r) => r.id);
    try {
      const { tenant } = await h.tenant();
      const headers = await authHeaders(h.auth, tenant, 'admin');
      const e = await hire(h.store, tenant.tenantId, 'replay');
      for (let i = 1; i < 50; i++) await e.rename(`replay-${i}`);
      const cursors = await h.feedCursors(headers, 50);
      const created = await h.app.inject({
        method: 'POST',
        url: '/v1/webhooks',
        headers,
        payload: { url: receiver.url, events: ['employee.hired', 'employee.details_changed'], after: START_CURSOR },
      });
      expect(created.statusCode, created.body).toBe(201);
      const endpointId = created.json<{ id: string }>().id;

      await waitFor(() => arrivals().length >= 5, 10_000);
      const replay = await h.app.inject({
        method: 'POST',
        url: `/v1/webhooks/${endpointId}/replay`,
        headers,
        payload: { after: START_CURSOR },
      });
      expect(replay.statusCode, replay.body).toBe(202);
      const at202 = arrivals().length;

      // However many the old run sent before the switch, the replay then sends all 50.
      await waitFor(() => {
        const switched = arrivals().indexOf(cursors[0] ?? '', 1);
        return switched >= 0 && arrivals().length >= switched + 50;
      }, 30_000);
      const settled = arrivals().length;
      expect(await staysTrue(() => arrivals().length === settled, 300)).toBe(true); // nothing more comes
      expect(receiver.maxInFlight()).toBe(1);
      // The old run's deliveries from the old cursor, then the replay's from its cursor: the switch
      // came before the 202 (the replay's run may already have sent its first by then), and
      // nothing of the old run after it.
      const restart = arrivals().indexOf(cursors[0] ?? '', 1);
      expect(restart).toBeGreaterThanOrEqual(5);
      expect(restart).toBeLessThanOrEqual(at202);
      expect(arrivals().slice(0, restart)).toEqual(cursors.slice(0, restart));
      expect(arrivals().slice(restart)).toEqual(cursors);
    } finally {
      await dispatcher.close();
      await receiver.close();
      if (withRedis) {
        const redis = new Redis(redisUrl);
        const keys = await redis.keys(`${prefix}:*`);
        if (keys.length > 0) await redis.del(...keys);
        redis.disconnect();
      }
    }
  }, 60_000);
});

describe('when the target host resolves slowly', () => {
  it('counts the DNS lookup in the attempt’s time bound', async () => {
    // The lookup's slowness is what the attempt's time bound must cover.
    const slowResolver = () =>
      new Promise<Array<{ address: string; family: 4 }>>((resolve) =>
        setTimeout(() => resolve([{ address: '127.0.0.1', family: 4 }]), 3_000),
      );
    const started = Date.now();
    const outcome = await sendWebhook(
      'http://slow.example.test:9/hook',
      generateSigningSecret(),
      { id: 'x', type: 'employee.hired', timestamp: new Date().toISOString(), data: {} },
      { policy: { allowHosts: ['slow.example.test'], resolver: slowResolver }, timeoutMs: 300 },
    );
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(outcome).toMatchObject({ kind: 'failed', status: null, error: expect.stringMatching(/no answer within 300 ms/) });
  });
});
