import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { hire } from '../../support/harness/changes.ts';
import { createMemoryLogger } from '../../support/logs.ts';
import { waitFor } from '../../support/waitFor.ts';
import { startReceiver } from '../../support/webhooks/receiver.ts';
import { FAST_RETRIES, useWebhooks } from '../../support/harness/webhooks.ts';
import { INTERNAL_FAILURE } from '../../../services/webhooks/deliveryRun.ts';
import { createSecretBox, type SecretBox } from '../../../services/webhooks/secrets.ts';

/**
 * An error on the service's side during an attempt: recorded and retried like a receiver's
 * failure, its text kept out of the delivery log and the operator's log, and never a reason to
 * disable the endpoint (it says nothing of the receiver): once the fault is gone, delivery resumes.
 */
const PERSONAL = 'ada.lovelace@example.test';
const ADDRESS = '12 Analytical Engine Row';
const gateway = createSecretBox(randomBytes(32));
let fixed = false;
// Not SecretUnavailableError: an error the run does not expect, whose message quotes personal
// data on more than one line (the stack repeats every line of a message).
const broken: SecretBox = {
  seal: (plain) => gateway.seal(plain),
  open: (sealed) => {
    if (!fixed) throw new TypeError(`unexpected state while opening the secret for ${PERSONAL}\nwho lives at ${ADDRESS}`);
    return gateway.open(sealed);
  },
  isStale: (sealed) => gateway.isStale(sealed),
  keyId: gateway.keyId,
};
const logs = createMemoryLogger('info');
const wh = useWebhooks({ secrets: gateway, dispatcherSecrets: broken, dispatcher: { logger: logs.logger } });
const { admin, register } = wh;

type Endpoint = { id: string; status: string; disabledReason: string | null };
type Delivery = { status: string; attempts: number; lastStatusCode: number | null; lastError: string | null };

describe('when attempts fail with an unexpected error on the service’s side', () => {
  it('records them with a generic reason, keeps retrying past the schedule without disabling, and delivers once fixed', async () => {
    const { tenant, headers } = await admin();
    const receiver = await startReceiver();
    try {
      const endpoint = await register(headers, receiver.url);
      await hire(wh.h.store, tenant.tenantId, 'internal');
      const deliveries = async () =>
        (await wh.h.app.inject({ method: 'GET', url: `/v1/webhooks/${endpoint.id}/deliveries`, headers })).json<{ data: Delivery[] }>()
          .data;
      // Past the attempt after which a receiver's failures disable the endpoint.
      const failing = await waitFor(async () => {
        const [delivery] = await deliveries();
        return delivery !== undefined && delivery.attempts > 2 + FAST_RETRIES.scheduleMs.length ? delivery : undefined;
      });
      expect(failing).toMatchObject({ lastStatusCode: null, lastError: INTERNAL_FAILURE });
      const list = (await wh.h.app.inject({ method: 'GET', url: '/v1/webhooks', headers })).json<{ data: Endpoint[] }>();
      expect(list.data.find((e) => e.id === endpoint.id)).toMatchObject({ status: 'active', disabledReason: null });
      expect(receiver.requests).toHaveLength(0);

      fixed = true;
      await waitFor(() => receiver.requests.length >= 1);
      const [delivered] = await waitFor(async () => {
        const found = await deliveries();
        return found[0]?.status === 'succeeded' ? found : undefined;
      });
      expect(delivered?.lastError).toBeNull();

      // The operator learns where it failed, and neither line of the message.
      const failures = logs.lines.filter((line) => line.msg === 'webhook delivery attempt failed on our side');
      expect(failures.length).toBeGreaterThan(2 + FAST_RETRIES.scheduleMs.length - 1);
      expect(failures[0]).toMatchObject({ endpointId: endpoint.id, error: { type: 'TypeError', stack: expect.stringMatching(/^\s+at /) } });
      const everything = JSON.stringify(logs.lines) + JSON.stringify(await deliveries());
      expect(everything).not.toContain(PERSONAL);
      expect(everything).not.toContain(ADDRESS);
    } finally {
      await receiver.close();
    }
  });
});
