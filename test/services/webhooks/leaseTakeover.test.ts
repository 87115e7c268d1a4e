import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { resolve } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authHeaders } from '../../support/auth.ts';
import { sqlAt } from '../../support/database.ts';
import { stopProcess } from '../../support/processes.ts';
import { createChangesHarness, hire, waitFor, type ChangesHarness } from '../changes/harness.ts';
import { webhooksCapability } from '../../../services/webhooks/capability.ts';
import { startWebhookDispatcher, type WebhookDispatcher } from '../../../services/webhooks/dispatcher.ts';
import { createSecretBox } from '../../../services/webhooks/secrets.ts';
import { recordAttempt, recordDelivered } from '../../../services/webhooks/store.ts';
import { firstArrivals, startReceiver } from './receiver.ts';

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

async function startChildWorker(databaseUrl: string): Promise<ChildProcess> {
  const worker = spawn(process.execPath, [resolve(import.meta.dirname, 'support/dispatcherChild.ts')], {
    env: { ...process.env, DATABASE_URL: databaseUrl, REDIS_URL: redisUrl, QUEUE_PREFIX: prefix, SECRETS_KEY: key.toString('hex') },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise<void>((ready, fail) => {
    let out = '';
    worker.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8');
      if (out.includes('ready\n')) ready();
    });
    worker.once('exit', (code, signal) => fail(new Error(`the worker exited before it was ready (${code ?? signal})`)));
  });
  return worker;
}

beforeAll(async () => {
  h = await createChangesHarness((db) => webhooksCapability({ pool: db.pool, secrets, targets: { allowHosts: ['127.0.0.1'] } }));
});
afterAll(async () => {
  if (child) await stopProcess(child);
  await survivor?.close();
  // The dead worker's job is still marked active in Redis: remove this test's keys.
  const redis = new Redis(redisUrl);
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
      const created = await h.app.inject({ method: 'POST', url: '/v1/webhooks', headers, payload: { url: receiver.url, events: ['employee.hired', 'employee.details_changed'] } });
      expect(created.statusCode).toBe(201);
      const endpointId = created.json<{ id: string }>().id;
      const e = await hire(h.store, tenant.tenantId, 'lease');
      for (let i = 1; i < 5; i++) await e.rename(`lease-${i}`);
      const cursors = await waitFor(async () => {
        const r = await h.app.inject({ method: 'GET', url: '/v1/employees/changes?limit=1000', headers });
        const all = r.json<{ data: Array<{ cursor: string }> }>().data.map((c) => c.cursor);
        return all.length === 5 ? all : undefined;
      });

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
      expect(held.lease_left_s).toBeGreaterThan(60); // the dead worker's lease: its 60-s timeout + 30 s
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
      // While the lease holds, the survivor sweeps (every 100 ms) and leaves the endpoint alone:
      // one delivery in flight per endpoint, even when its worker is gone.
      await new Promise((r) => setTimeout(r, 1_000));
      expect(receiver.requests).toHaveLength(1);
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

      // The survivor recorded them all and let the lease go; the dead worker's token, were its
      // process to come back, moves nothing.
      const done = await waitFor(async () => {
        const row = await endpointRow();
        return row?.lease_token === null && row.cursor_commit !== held.cursor_commit ? row : undefined;
      });
      const stale = { position: { commit: 1n, prepare: 1n }, type: 'employee.hired' };
      expect(await recordDelivered(h.db.pool, tenant.tenantId, endpointId, deadToken, [{ ...stale, statusCode: 204, at: new Date() }], 90_000)).toBe(false);
      expect(await recordAttempt(h.db.pool, tenant.tenantId, endpointId, deadToken, { change: stale, statusCode: 500, error: null, outcome: { kind: 'disable', reason: 'stale' } })).toBe(false);
      const after = await endpointRow();
      expect(after).toEqual(done);
      const status = await sqlAt<{ status: string }>(h.db.url, 'select status from webhook_endpoints where id = $1', [endpointId]);
      expect(status[0]?.status).toBe('active');
    } finally {
      await receiver.close();
    }
  }, 60_000);
});
