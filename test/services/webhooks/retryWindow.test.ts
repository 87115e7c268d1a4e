import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authHeaders } from '../../support/auth.ts';
import { createChangesHarness, hire, type ChangesHarness } from '../../support/harness/changes.ts';
import { waitFor } from '../../support/waitFor.ts';
import { webhooksCapability } from '../../../services/webhooks/capability.ts';
import { startWebhookDispatcher, type WebhookDispatcher } from '../../../services/webhooks/dispatcher.ts';
import { createSecretBox } from '../../../services/webhooks/secrets.ts';
import { startReceiver } from '../../support/webhooks/receiver.ts';

/**
 * Retries go on daily for up to 3 days after the first failed attempt, bounded by that window and
 * not only by their count: otherwise a receiver that kept asking `Retry-After: 86400` would stretch
 * them to about 8 days. Here the window is scaled down (2.5 s, eight retries 100 ms apart on the
 * schedule, the receiver asking for 1 s every time): real PostgreSQL, a real HTTP receiver, the
 * in-process dispatcher.
 */
const secrets = createSecretBox(randomBytes(32));
const WINDOW_MS = 2_500;
let h: ChangesHarness;
let dispatcher: WebhookDispatcher;

beforeAll(async () => {
  h = await createChangesHarness((db) => webhooksCapability({ pool: db.pool, secrets, targets: { allowHosts: ['127.0.0.1'] } }));
  dispatcher = await startWebhookDispatcher({
    pool: h.db.pool,
    databaseUrl: h.db.url,
    prefix: 'unused-without-redis',
    secrets,
    targets: { allowHosts: ['127.0.0.1'] },
    retry: { scheduleMs: Array.from({ length: 8 }, () => 100), jitter: 0, maxRetryAfterMs: 5_000, windowMs: WINDOW_MS },
    timeoutMs: 2_000,
    sweepEveryMs: 60_000,
  });
});
afterAll(async () => {
  await dispatcher?.close();
  await h?.close();
});

describe('when a receiver keeps failing and asks for more time than the retry window leaves', () => {
  it('retries only within the window from the first failure, then disables the endpoint', async () => {
    const receiver = await startReceiver(() => ({ status: 503, headers: { 'retry-after': '1' } }));
    try {
      const { tenant } = await h.tenant();
      const headers = await authHeaders(h.auth, tenant, 'admin');
      const registered = await h.app.inject({
        method: 'POST',
        url: '/v1/webhooks',
        headers,
        payload: { url: receiver.url, events: ['employee.hired'] },
      });
      expect(registered.statusCode, registered.body).toBe(201);
      const { id } = registered.json<{ id: string }>();
      await hire(h.store, tenant.tenantId, 'window');
      const disabled = await waitFor(async () => {
        const list = (await h.app.inject({ method: 'GET', url: '/v1/webhooks', headers })).json<{
          data: Array<{ id: string; status: string; disabledReason: string | null }>;
        }>();
        const found = list.data.find((w) => w.id === id);
        return found?.status === 'disabled' ? found : undefined;
      }, 15_000);
      expect(disabled.disabledReason).toMatch(/Every retry failed.*HTTP 503/);
      // The first attempt, then retries 1 s apart while they end within 2.5 s of it: at 1 s and
      // 2 s; the next (3 s) would end past the window. The count alone allowed eight.
      expect(receiver.requests).toHaveLength(3);
      const [first, , last] = receiver.requests;
      expect((last?.at ?? 0) - (first?.at ?? 0)).toBeLessThanOrEqual(WINDOW_MS);
    } finally {
      await receiver.close();
    }
  });
});
