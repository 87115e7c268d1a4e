import { describe, expect, it } from 'vitest';
import { hire } from '../../support/harness/changes.ts';
import { waitFor } from '../../support/waitFor.ts';
import { sqlAt } from '../../support/database.ts';
import { startReceiver } from '../../support/webhooks/receiver.ts';
import { useWebhooks } from '../../support/harness/webhooks.ts';

/** The webhook delivery log and its retention. */
const wh = useWebhooks();
const { admin, register } = wh;

type LogEntry = { cursor: string; status: string; attempts: number; lastAttemptAt: string; nextAttemptAt: string | null };

describe("the delivery log's retention (30 days after an entry's last attempt by default)", () => {
  const deliveryLog = async (headers: Record<string, string>, endpointId: string) =>
    (await wh.h.app.inject({ method: 'GET', url: `/v1/webhooks/${endpointId}/deliveries`, headers })).json<{ data: LogEntry[] }>().data;
  const age = (endpointId: string, days: number) =>
    sqlAt(
      wh.h.db.url,
      `update webhook_deliveries set last_attempt_at = last_attempt_at - make_interval(days => $2) where endpoint_id = $1`,
      [endpointId, days],
    );

  it('drops older entries on its schedule and keeps the recent ones', async () => {
    const { tenant, headers } = await admin();
    const receiver = await startReceiver();
    try {
      const endpoint = await register(headers, receiver.url);
      const e = await hire(wh.h.store, tenant.tenantId, 'kept');
      await e.rename('kept-1');
      const old = await wh.h.feedCursors(headers, 2);
      await waitFor(async () => ((await deliveryLog(headers, endpoint.id)).length === 2 ? true : undefined));
      await age(endpoint.id, 31);
      await e.rename('kept-2');
      const cursors = await wh.h.feedCursors(headers, 3);
      // No call here: the dispatcher's own schedule (every 250 ms in this file) trims.
      const log = await waitFor(async () => {
        const entries = await deliveryLog(headers, endpoint.id);
        return entries.length === 1 && entries[0]?.status === 'succeeded' ? entries : undefined;
      });
      expect(log.map((d) => d.cursor)).toEqual([cursors[2]]);
      expect(cursors.slice(0, 2)).toEqual(old);
      expect(Date.now() - Date.parse(log[0]?.lastAttemptAt ?? '')).toBeLessThan(60_000);
      expect(receiver.acknowledged()).toEqual(cursors); // trimming the log redelivers nothing
      // An entry just inside the retention stays.
      await age(endpoint.id, 29);
      expect(await wh.dispatcher.trim()).toBe(0);
      expect((await deliveryLog(headers, endpoint.id)).map((d) => d.cursor)).toEqual([cursors[2]]);
    } finally {
      await receiver.close();
    }
  });

  it('keeps the entry of a retry still to come, however old its first attempt, and drops a stale one', async () => {
    const { tenant, headers } = await admin();
    const receiver = await startReceiver(() => ({ status: 503, headers: { 'retry-after': '5' } }));
    try {
      const endpoint = await register(headers, receiver.url);
      await hire(wh.h.store, tenant.tenantId, 'pending');
      const [entry] = await waitFor(async () => {
        const entries = await deliveryLog(headers, endpoint.id);
        return entries[0]?.status === 'retrying' ? entries : undefined;
      });
      // The retry moves an hour out (the endpoint's own schedule too, so nothing attempts it meanwhile), and its first attempt 40 days back.
      await sqlAt(wh.h.db.url, `update webhook_endpoints set next_attempt_at = now() + interval '1 hour' where id = $1`, [endpoint.id]);
      await sqlAt(wh.h.db.url, `update webhook_deliveries set next_attempt_at = now() + interval '1 hour' where endpoint_id = $1`, [
        endpoint.id,
      ]);
      await age(endpoint.id, 40);
      expect(await wh.dispatcher.trim()).toBe(0);
      expect(await deliveryLog(headers, endpoint.id)).toEqual([
        expect.objectContaining({ cursor: entry?.cursor, status: 'retrying', attempts: 1 }),
      ]);

      // A retrying entry whose next attempt is long past (left behind, e.g. by a replay past it) goes.
      // (The dispatcher's schedule may get there first: then this call finds nothing left.)
      await sqlAt(wh.h.db.url, `update webhook_deliveries set next_attempt_at = now() - interval '39 days' where endpoint_id = $1`, [
        endpoint.id,
      ]);
      expect(await wh.dispatcher.trim()).toBeLessThanOrEqual(1);
      expect(await deliveryLog(headers, endpoint.id)).toEqual([]);
    } finally {
      await receiver.close();
    }
  });
});
