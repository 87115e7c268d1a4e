import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { hire } from '../../support/harness/changes.ts';
import { createMemoryLogger } from '../../support/logs.ts';
import { startReceiver } from '../../support/webhooks/receiver.ts';
import { FAST_RETRIES, useWebhooks } from '../../support/harness/webhooks.ts';
import { INTERNAL_FAILURE } from '../../../services/webhooks/deliveryRun.ts';
import { createSecretBox, type SecretBox } from '../../../services/webhooks/secrets.ts';

/**
 * An error on the service's side during an attempt: recorded and retried like a receiver's
 * failure (then the endpoint disabled, as after a lost signing key), its text kept out of the
 * delivery log and out of the operator's log.
 */
const PERSONAL = 'ada.lovelace@example.test';
const ADDRESS = '12 Analytical Engine Row';
const gateway = createSecretBox(randomBytes(32));
// Not SecretUnavailableError: an error the run does not expect, whose message quotes personal
// data on more than one line, one of them shaped like a stack frame (the stack repeats it all).
const broken: SecretBox = {
  seal: (plain) => gateway.seal(plain),
  open: () => {
    throw new TypeError(`unexpected state while opening the secret for ${PERSONAL}\n    at ${ADDRESS}`);
  },
  isStale: (sealed) => gateway.isStale(sealed),
  keyId: gateway.keyId,
};
const logs = createMemoryLogger('info');
const wh = useWebhooks({ secrets: gateway, dispatcherSecrets: broken, dispatcher: { logger: logs.logger } });
const { admin, register } = wh;

type Delivery = { status: string; attempts: number; lastStatusCode: number | null; lastError: string | null };

describe('when an attempt fails with an unexpected error on the service’s side', () => {
  it('records it as a failed attempt with a generic reason, retries on the schedule, then disables the endpoint', async () => {
    const { tenant, headers } = await admin();
    const receiver = await startReceiver();
    try {
      const endpoint = await register(headers, receiver.url);
      await hire(wh.h.store, tenant.tenantId, 'internal');
      const disabled = await wh.disabled(headers, endpoint.id);
      expect(disabled.disabledReason).toContain(INTERNAL_FAILURE);
      const log = await wh.h.app.inject({ method: 'GET', url: `/v1/webhooks/${endpoint.id}/deliveries`, headers });
      expect(log.json<{ data: Delivery[] }>().data).toEqual([
        expect.objectContaining({
          status: 'failed',
          attempts: 1 + FAST_RETRIES.scheduleMs.length,
          lastStatusCode: null,
          lastError: INTERNAL_FAILURE,
        }),
      ]);
      expect(receiver.requests).toHaveLength(0);
      // The operator learns where it failed, and no line of the message.
      const failures = logs.lines.filter((line) => line.msg === 'webhook delivery attempt failed on our side');
      expect(failures).toHaveLength(1 + FAST_RETRIES.scheduleMs.length);
      expect(failures[0]).toMatchObject({ endpointId: endpoint.id, error: { type: 'TypeError', stack: expect.stringMatching(/^\s+at /) } });
      const everything = JSON.stringify(logs.lines) + log.body + JSON.stringify(disabled);
      expect(everything).not.toContain(PERSONAL);
      expect(everything).not.toContain(ADDRESS);
    } finally {
      await receiver.close();
    }
  });
});
