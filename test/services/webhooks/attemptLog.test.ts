import { describe, expect, it } from 'vitest';
import { hire } from '../../support/harness/changes.ts';
import { sqlAt } from '../../support/database.ts';
import { waitFor } from '../../support/waitFor.ts';
import { startReceiver } from '../../support/webhooks/receiver.ts';
import { FAST_RETRIES, useWebhooks } from '../../support/harness/webhooks.ts';
import { ATTEMPTS_KEPT } from '../../../services/webhooks/deliveryLog.ts';
import { DEFAULT_DELIVERY_RETENTION_MS } from '../../../services/webhooks/dispatcher.ts';

/** The delivery log lists every attempt of a change: when, the receiver's status code, how long, why it failed. */
const wh = useWebhooks();
const { admin, register } = wh;

type Attempt = { at: string; statusCode: number | null; durationMs: number; error: string | null };
type Delivery = { cursor: string; status: string; attempts: number; lastStatusCode: number | null; attemptLog: Attempt[] };

const deliveries = async (headers: Record<string, string>, endpointId: string, query = '') => {
  const response = await wh.h.app.inject({ method: 'GET', url: `/v1/webhooks/${endpointId}/deliveries${query}`, headers });
  expect(response.statusCode).toBe(200);
  return response.json<{ data: Delivery[] }>().data;
};

describe('when a receiver answers 500 and then 200', () => {
  it('lists both attempts of the delivery, with their status codes, errors, times and durations', async () => {
    const { tenant, headers } = await admin();
    // Each answer takes 150 ms, which the durations must show.
    const receiver = await startReceiver((n) => ({ status: n === 0 ? 500 : 200 }), { delayMs: 150 });
    try {
      const endpoint = await register(headers, receiver.url);
      await hire(wh.h.store, tenant.tenantId, 'twice');
      const [cursor] = await wh.h.feedCursors(headers, 1);
      const [entry] = await waitFor(async () => {
        const log = await deliveries(headers, endpoint.id);
        return log[0]?.status === 'succeeded' ? log : undefined;
      });
      expect(entry).toMatchObject({ cursor, status: 'succeeded', attempts: 2, lastStatusCode: 200 });
      expect(entry?.attemptLog).toEqual([
        { at: expect.any(String), statusCode: 500, durationMs: expect.any(Number), error: 'HTTP 500' },
        { at: expect.any(String), statusCode: 200, durationMs: expect.any(Number), error: null },
      ]);
      const [first, second] = entry?.attemptLog ?? [];
      for (const attempt of [first, second]) expect(attempt?.durationMs).toBeGreaterThanOrEqual(140);
      // The retry came after the first answer, on the schedule (100 ms ± 20 % in this file).
      const gap = Date.parse(second?.at ?? '') - Date.parse(first?.at ?? '');
      expect(gap).toBeGreaterThanOrEqual((first?.durationMs ?? 0) + 80 - 5);
      // The receiver saw the same two: the log is not made up.
      expect(receiver.requests.map((r) => [r.id, r.status])).toEqual([
        [cursor, 500],
        [cursor, 200],
      ]);
    } finally {
      await receiver.close();
    }
  });
});

describe('the log filtered by status, and bounded per delivery', () => {
  it('lists only the entries in the status asked for, and keeps the latest attempts of a change retried many times', async () => {
    const { tenant, headers } = await admin();
    // The first change is acknowledged; the second is refused every time.
    const receiver = await startReceiver((n) => ({ status: n === 0 ? 204 : 500 }));
    try {
      const endpoint = await register(headers, receiver.url);
      const e = await hire(wh.h.store, tenant.tenantId, 'filter');
      await e.rename('filter-1');
      const [delivered, refused] = await wh.h.feedCursors(headers, 2);
      const perRound = 1 + FAST_RETRIES.scheduleMs.length;
      const failed = async (attempts: number) =>
        waitFor(async () => {
          const [entry, ...rest] = await deliveries(headers, endpoint.id, '?status=failed');
          return entry?.attempts === attempts && rest.length === 0 ? entry : undefined;
        });
      expect(await failed(perRound)).toMatchObject({ cursor: refused, status: 'failed' });
      expect(await deliveries(headers, endpoint.id, '?status=succeeded')).toEqual([
        expect.objectContaining({ cursor: delivered, status: 'succeeded', attempts: 1 }),
      ]);
      expect(await deliveries(headers, endpoint.id, '?status=retrying')).toEqual([]);
      const bad = await wh.h.app.inject({ method: 'GET', url: `/v1/webhooks/${endpoint.id}/deliveries?status=lost`, headers });
      expect(bad.statusCode).toBe(400);

      // Replays past the bound: every attempt counts, the latest ATTEMPTS_KEPT are listed.
      let rounds = 1;
      while (rounds * perRound <= ATTEMPTS_KEPT) {
        const replay = await wh.h.app.inject({
          method: 'POST',
          url: `/v1/webhooks/${endpoint.id}/replay`,
          headers,
          payload: { after: delivered },
        });
        expect(replay.statusCode).toBe(202);
        rounds++;
        await failed(rounds * perRound);
      }
      const entry = await failed(rounds * perRound);
      expect(entry.attemptLog).toHaveLength(ATTEMPTS_KEPT);
      expect(entry.attemptLog.every((a) => a.statusCode === 500 && a.error === 'HTTP 500')).toBe(true);
      const times = entry.attemptLog.map((a) => Date.parse(a.at));
      expect(times).toEqual([...times].sort((a, b) => a - b)); // oldest first
      // The latest ones: the last listed is the receiver's last request for the change.
      const lastRequest = receiver.requests.filter((r) => r.id === refused).at(-1);
      expect(Math.abs((times.at(-1) ?? 0) - (lastRequest?.at ?? 0))).toBeLessThan(1_000);
      expect(receiver.requests.filter((r) => r.id === refused)).toHaveLength(rounds * perRound);
    } finally {
      await receiver.close();
    }
  });
});

describe('when a change is attempted again long after its earlier attempts', () => {
  it('drops the attempts older than the retention from its entry, and still counts them', async () => {
    const { tenant, headers } = await admin();
    const receiver = await startReceiver();
    try {
      const endpoint = await register(headers, receiver.url);
      const e = await hire(wh.h.store, tenant.tenantId, 'aged');
      await e.rename('aged-1');
      const [first, second] = await wh.h.feedCursors(headers, 2);
      // The receiver answering is not enough: the dispatcher records the outcome after it.
      await waitFor(async () => {
        const log = await deliveries(headers, endpoint.id);
        return log.length === 2 && log.every((d) => d.status === 'succeeded');
      });
      // The second change's attempt made longer ago than the retention (30 days here).
      const longAgo = new Date(Date.now() - DEFAULT_DELIVERY_RETENTION_MS - 86_400_000).toISOString();
      const aged = await sqlAt(
        wh.h.db.url,
        `update webhook_deliveries set attempt_log = jsonb_set(attempt_log, '{0,at}', to_jsonb($2::text))
         where endpoint_id = $1 and jsonb_array_length(attempt_log) = 1 and status = 'succeeded'
           and (commit_position, prepare_position) = (select commit_position, prepare_position from webhook_deliveries
                                                      where endpoint_id = $1 order by commit_position desc, prepare_position desc limit 1)
         returning 1`,
        [endpoint.id, longAgo],
      );
      expect(aged).toHaveLength(1);
      const replay = await wh.h.app.inject({
        method: 'POST',
        url: `/v1/webhooks/${endpoint.id}/replay`,
        headers,
        payload: { after: first },
      });
      expect(replay.statusCode).toBe(202);
      const entry = await waitFor(async () => {
        const found = (await deliveries(headers, endpoint.id)).find((d) => d.cursor === second);
        return found?.attempts === 2 ? found : undefined;
      });
      expect(entry.attemptLog).toEqual([{ at: expect.any(String), statusCode: 204, durationMs: expect.any(Number), error: null }]);
      expect(entry.attemptLog[0]?.at).not.toBe(longAgo);
    } finally {
      await receiver.close();
    }
  });
});

describe('the API document', () => {
  it('describes each attempt and the status filter', async () => {
    const doc = (await wh.h.app.inject({ method: 'GET', url: '/v1/openapi.json' })).json<{
      paths: Record<string, { get?: { parameters?: Array<{ name: string; in: string }> } }>;
      components: { schemas: Record<string, { properties?: Record<string, unknown> }> };
    }>();
    const parameters = doc.paths['/v1/webhooks/{id}/deliveries']?.get?.parameters ?? [];
    expect(parameters).toEqual(expect.arrayContaining([expect.objectContaining({ name: 'status', in: 'query' })]));
    expect(Object.keys(doc.components.schemas.WebhookDelivery?.properties ?? {})).toContain('attemptLog');
    expect(Object.keys(doc.components.schemas.WebhookDeliveryAttempt?.properties ?? {}).sort()).toEqual([
      'at',
      'durationMs',
      'error',
      'statusCode',
    ]);
  });
});
