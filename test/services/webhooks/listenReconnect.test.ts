import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authHeaders } from '../../support/auth.ts';
import { sqlAt } from '../../support/database.ts';
import { createChangesHarness, hire, type ChangesHarness } from '../../support/harness/changes.ts';
import { waitFor } from '../../support/waitFor.ts';
import { startReceiver } from '../../support/webhooks/receiver.ts';
import { CHANGES_CHANNEL } from '../../../projections/changes/changesProjection.ts';
import { webhooksCapability } from '../../../services/webhooks/capability.ts';
import { startWebhookDispatcher, type WebhookDispatcher } from '../../../services/webhooks/dispatcher.ts';
import { createSecretBox } from '../../../services/webhooks/secrets.ts';

/**
 * The dispatcher's LISTEN connection is what makes a delivery prompt; the sweep is only the
 * fallback. Here the sweep runs once a minute, so a delivery within seconds came by NOTIFY.
 */
const secrets = createSecretBox(randomBytes(32));
const targets = { allowHosts: ['127.0.0.1'] };
let h: ChangesHarness;
let dispatcher: WebhookDispatcher;

beforeAll(async () => {
  h = await createChangesHarness((db) => webhooksCapability({ pool: db.pool, secrets, targets }));
  dispatcher = await startWebhookDispatcher({
    pool: h.db.pool,
    databaseUrl: h.db.url,
    prefix: 'unused',
    secrets,
    targets,
    timeoutMs: 2_000,
    sweepEveryMs: 60_000,
  });
});
afterAll(async () => {
  await dispatcher.close();
  await h.close();
});

/** The backends LISTENing on the change feed's channel (the dispatcher's connection). */
const listeners = () =>
  sqlAt<{ pid: number }>(h.db.url, `select pid from pg_stat_activity where datname = current_database() and query = $1`, [
    `listen ${CHANGES_CHANNEL}`,
  ]);

describe('when PostgreSQL ends the webhook dispatcher’s LISTEN connection', () => {
  it('listens again and delivers the next change without waiting for a sweep', async () => {
    const { tenant } = await h.tenant();
    const headers = await authHeaders(h.auth, tenant, 'admin');
    const receiver = await startReceiver();
    try {
      const registered = await h.app.inject({
        method: 'POST',
        url: '/v1/webhooks',
        headers,
        payload: { url: receiver.url, events: ['employee.hired'] },
      });
      expect(registered.statusCode).toBe(201);
      await hire(h.store, tenant.tenantId, 'before');
      await waitFor(() => receiver.acknowledged().length >= 1, 10_000, 'the first delivery');

      const before = await listeners();
      expect(before).toHaveLength(1);
      await sqlAt(h.db.url, 'select pg_terminate_backend($1)', [before[0]?.pid]);
      // A restart or fail-over looks the same to the client: the server ends the connection.
      await waitFor(async () => (await listeners()).some((l) => l.pid !== before[0]?.pid), 4_000, 'a new LISTEN connection');

      await hire(h.store, tenant.tenantId, 'after');
      await waitFor(() => receiver.acknowledged().length >= 2, 4_000, 'the delivery after the reconnect');
    } finally {
      await receiver.close();
    }
  });
});
