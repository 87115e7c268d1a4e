import { createCipheriv, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { Webhook } from 'standardwebhooks';
import { hire } from '../../support/harness/changes.ts';
import { sqlAt } from '../../support/database.ts';
import { waitFor } from '../../support/waitFor.ts';
import { startReceiver } from '../../support/webhooks/receiver.ts';
import { FAST_RETRIES, useWebhooks } from '../../support/harness/webhooks.ts';
import { createSecretBox, secretsKeyId, type SecretBox } from '../../../services/webhooks/secrets.ts';

/** Signing secrets the worker cannot open, and rotating the key that seals them. */

/** A secret box whose key the test changes, as an operator changes the configuration. */
function switchable(initial: SecretBox) {
  let box = initial;
  const proxy: SecretBox = {
    seal: (plain) => box.seal(plain),
    open: (sealed) => box.open(sealed),
    isStale: (sealed) => box.isStale(sealed),
    get keyId() {
      return box.keyId;
    },
  };
  return { proxy, use: (next: SecretBox) => (box = next) };
}

/** The sealed form from before key ids: `v1.` + base64 of iv, tag, ciphertext. */
function sealWithoutKeyId(key: Buffer, plain: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  const body = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
  return `v1.${Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64')}`;
}

const gateway = switchable(createSecretBox(randomBytes(32)));
const worker = switchable(createSecretBox(randomBytes(32)));
const wh = useWebhooks({ secrets: gateway.proxy, dispatcherSecrets: worker.proxy });
const { admin, register } = wh;

type Delivery = {
  status: string;
  attempts: number;
  lastStatusCode: number | null;
  lastError: string | null;
  attemptLog: Array<{ at: string; statusCode: number | null; error: string | null }>;
};

describe('when the worker cannot open an endpoint’s signing secret', () => {
  it('records each attempt as failed with the reason, retries on the schedule, then disables the endpoint', async () => {
    const gatewayKey = randomBytes(32);
    const workerKey = randomBytes(32);
    gateway.use(createSecretBox(gatewayKey));
    worker.use(createSecretBox(workerKey));
    const { tenant, headers } = await admin();
    const receiver = await startReceiver();
    try {
      const endpoint = await register(headers, receiver.url);
      await hire(wh.h.store, tenant.tenantId, 'sealed');
      const disabled = await wh.disabled(headers, endpoint.id);
      expect(disabled.disabledReason).toMatch(/Every retry failed \(last: signing secret unavailable/);
      const log = (await wh.h.app.inject({ method: 'GET', url: `/v1/webhooks/${endpoint.id}/deliveries`, headers })).json<{
        data: Delivery[];
      }>().data;
      expect(log).toEqual([
        expect.objectContaining({ status: 'failed', attempts: 1 + FAST_RETRIES.scheduleMs.length, lastStatusCode: null }),
      ]);
      const error = log[0]?.lastError ?? '';
      expect(error).toBe(
        `signing secret unavailable: it is sealed with key ${secretsKeyId(gatewayKey)}, which this service is not configured with; an operator must restore the key`,
      );
      // Neither key nor the secret, in any encoding, reaches the tenant.
      for (const material of [gatewayKey, workerKey])
        for (const encoding of ['base64', 'hex', 'base64url'] as const) expect(error).not.toContain(material.toString(encoding));
      expect(error).not.toContain(endpoint.secret.slice(6));
      expect(receiver.requests).toHaveLength(0); // nothing unsigned or wrongly signed went out
      // Every attempt is listed, the schedule's delay apart (100 ms ± 20 % in this file).
      const attempts = log[0]?.attemptLog ?? [];
      expect(attempts).toHaveLength(1 + FAST_RETRIES.scheduleMs.length);
      expect(attempts.every((a) => a.statusCode === null && a.error === error)).toBe(true);
      const times = attempts.map((a) => Date.parse(a.at));
      for (let i = 1; i < times.length; i++) expect((times[i] ?? 0) - (times[i - 1] ?? 0)).toBeGreaterThanOrEqual(75);
    } finally {
      await receiver.close();
    }
  });
});

describe('when WEBHOOK_SECRETS_KEY is rotated (the old key kept among the old keys)', () => {
  it('opens secrets sealed under the old key or in the form without a key id, seals new ones under the new key, and moves old ones to it', async () => {
    const oldKey = randomBytes(32);
    const newKey = randomBytes(32);
    gateway.use(createSecretBox(oldKey));
    worker.use(createSecretBox(newKey, [oldKey]));
    const { tenant, headers } = await admin();
    const receivers = await Promise.all([startReceiver(), startReceiver(), startReceiver()]);
    try {
      const [legacy, old] = [await register(headers, receivers[0]?.url ?? ''), await register(headers, receivers[1]?.url ?? '')];
      await sqlAt(wh.h.db.url, `update webhook_endpoints set secret_sealed = $2 where id = $1`, [
        legacy.id,
        sealWithoutKeyId(oldKey, legacy.secret),
      ]);
      gateway.use(createSecretBox(newKey, [oldKey]));
      const fresh = await register(headers, receivers[2]?.url ?? '');
      const sealed = async () =>
        new Map(
          (await sqlAt<{ id: string; secret_sealed: string }>(wh.h.db.url, `select id::text, secret_sealed from webhook_endpoints`)).map(
            (r) => [r.id, r.secret_sealed],
          ),
        );
      const before = await sealed();
      expect(before.get(legacy.id)).toMatch(/^v1\./);
      expect(before.get(old.id)).toMatch(new RegExp(`^v2\\.${secretsKeyId(oldKey)}\\.`));
      expect(before.get(fresh.id)).toMatch(new RegExp(`^v2\\.${secretsKeyId(newKey)}\\.`));

      await hire(wh.h.store, tenant.tenantId, 'rotated');
      const [cursor] = await wh.h.feedCursors(headers, 1);
      await waitFor(() => receivers.every((r) => r.acknowledged().length >= 1));
      for (const [receiver, endpoint] of [
        [receivers[0], legacy],
        [receivers[1], old],
        [receivers[2], fresh],
      ] as const) {
        const request = receiver?.requests[0];
        expect(request?.id).toBe(cursor);
        expect(() =>
          new Webhook(endpoint.secret).verify(request?.body ?? '', {
            'webhook-id': String(request?.headers['webhook-id']),
            'webhook-timestamp': String(request?.headers['webhook-timestamp']),
            'webhook-signature': String(request?.headers['webhook-signature']),
          }),
        ).not.toThrow();
      }
      // Delivering moved the old ones to the new key: the old key can be retired.
      const after = await waitFor(async () => {
        const now = await sealed();
        return [legacy.id, old.id].every((id) => now.get(id)?.startsWith(`v2.${secretsKeyId(newKey)}.`)) ? now : undefined;
      });
      const newOnly = createSecretBox(newKey);
      expect([legacy, old, fresh].map((e) => newOnly.open(after.get(e.id) ?? ''))).toEqual([legacy.secret, old.secret, fresh.secret]);
    } finally {
      await Promise.all(receivers.map((r) => r.close()));
    }
  });
});
