import { describe, expect, it } from 'vitest';
import { hire } from '../../support/harness/changes.ts';
import { waitFor } from '../../support/waitFor.ts';
import { startReceiver } from '../../support/webhooks/receiver.ts';
import { useWebhooks } from '../../support/harness/webhooks.ts';

/**
 * One tenant's endpoints take turns at its share of the slots: 6 endpoints, each with a long
 * backlog, a share of 2, and a job that yields its slot after 3 deliveries. Counted in deliveries
 * rather than time, so a loaded machine does not change the verdict.
 */
const ENDPOINTS = 6;
const SHARE = 2;
const BATCH = 3;
const BACKLOG = 60;
/** In turns, the last endpoint starts after two rounds of its siblings; this allows twice that. */
const JOBS_BOUND = 4;

describe.each([
  ['BullMQ jobs', false],
  ['in-process triggers (no Redis)', true],
])("when a tenant's endpoints all have a backlog longer than its share can take at once, with %s", (_, inProcess) => {
  const wh = useWebhooks({ inProcess, dispatcher: { tenantConcurrency: SHARE, batchPerJob: BATCH, concurrency: 16 } });
  it(`delivers to every one of them before any has had ${JOBS_BOUND} jobs' worth, and keeps them in turns`, async () => {
    const { tenant, headers } = await wh.admin();
    const receivers = await Promise.all(Array.from({ length: ENDPOINTS }, () => startReceiver(() => ({ status: 204 }), { delayMs: 30 })));
    try {
      const e = await hire(wh.h.store, tenant.tenantId, 'backlog');
      for (let i = 1; i < BACKLOG; i++) await e.rename(`backlog-${i}`);
      await wh.h.feedCursors(headers, BACKLOG);
      // Registered from the start once the backlog is in the feed: each has all of it to deliver.
      for (const receiver of receivers) {
        const registered = await wh.h.app.inject({
          method: 'POST',
          url: '/v1/webhooks',
          headers,
          payload: { url: receiver.url, events: ['employee.hired', 'employee.details_changed'], after: 'YzE6MDow' },
        });
        expect(registered.statusCode).toBe(201);
      }
      await waitFor(() => receivers.every((r) => r.requests.length >= 1), 30_000);
      const counts = receivers.map((r) => r.requests.length);
      expect(Math.max(...counts), `deliveries per endpoint when the last one got its first: ${counts.join(', ')}`).toBeLessThanOrEqual(
        JOBS_BOUND * BATCH,
      );
      // And they keep taking turns: when the first is through its backlog, none is far behind.
      await waitFor(() => receivers.some((r) => r.acknowledged().length >= BACKLOG), 30_000);
      const later = receivers.map((r) => r.requests.length);
      expect(Math.min(...later), `deliveries per endpoint when the first was through: ${later.join(', ')}`).toBeGreaterThanOrEqual(
        BACKLOG - JOBS_BOUND * BATCH,
      );
    } finally {
      await Promise.all(receivers.map((r) => r.close()));
    }
  }, 60_000);
});
