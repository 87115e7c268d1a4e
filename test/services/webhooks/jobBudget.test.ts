import { describe, expect, it } from 'vitest';
import { hire } from '../../support/harness/changes.ts';
import { waitFor } from '../../support/waitFor.ts';
import { startReceiver } from '../../support/webhooks/receiver.ts';
import { useWebhooks } from '../../support/harness/webhooks.ts';

/** One delivery slot in all, and a job yields it after 500 ms: a long backlog takes turns with other tenants. */
const wh = useWebhooks({ dispatcher: { concurrency: 1, jobBudgetMs: 500 } });
const { admin, register } = wh;

describe("when one endpoint has a backlog longer than a job's time budget", () => {
  it("delivers another tenant's change before that backlog is through", async () => {
    const backlogged = await admin();
    const other = await admin();
    const slowish = await startReceiver(() => ({ status: 204 }), { delayMs: 150 });
    const fast = await startReceiver();
    try {
      await register(other.headers, fast.url);
      const e = await hire(wh.h.store, backlogged.tenant.tenantId, 'backlog');
      for (let i = 1; i < 20; i++) await e.rename(`backlog-${i}`);
      const backlog = await wh.h.feedCursors(backlogged.headers, 20);
      // Registered once the backlog is in the feed, from its start: one job finds all 20.
      const registered = await wh.h.app.inject({
        method: 'POST',
        url: '/v1/webhooks',
        headers: backlogged.headers,
        payload: { url: slowish.url, events: ['employee.hired', 'employee.details_changed'], after: 'YzE6MDow' },
      });
      expect(registered.statusCode).toBe(201);
      await waitFor(() => slowish.requests.length >= 1);
      await hire(wh.h.store, other.tenant.tenantId, 'other');
      await waitFor(() => fast.acknowledged().length >= 1);
      await waitFor(() => slowish.acknowledged().length >= 20);
      // 20 answers of 150 ms take 3 s in one job; the other tenant's came well before the last.
      const otherAt = fast.requests[0]?.at ?? Infinity;
      const backlogDone = slowish.requests[19]?.at ?? 0;
      expect(otherAt).toBeLessThan(backlogDone);
      expect(slowish.requests.filter((r) => r.at < otherAt).length).toBeLessThan(20);
      expect(slowish.acknowledged()).toEqual(backlog); // in order, once each
    } finally {
      await fast.close();
      await slowish.close();
    }
  });
});
