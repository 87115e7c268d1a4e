import { describe, expect, it } from 'vitest';
import { Webhook } from 'standardwebhooks';
import { hire } from '../../support/harness/changes.ts';
import { waitFor } from '../../support/waitFor.ts';
import { dueEndpoints } from '../../../services/webhooks/lease.ts';
import { firstArrivals, startReceiver } from '../../support/webhooks/receiver.ts';
import { FAST_RETRIES, useWebhooks } from '../../support/harness/webhooks.ts';

/** Delivering changes to webhook endpoints: signatures, retries, timeouts and 410 Gone, against a real HTTP receiver. */
const wh = useWebhooks();
const { admin, register } = wh;

describe('when changes happen for a registered endpoint', () => {
  it('delivers them signed per Standard Webhooks, verifiable with the standardwebhooks library', async () => {
    const { tenant, headers } = await admin();
    const receiver = await startReceiver();
    try {
      const endpoint = await register(headers, receiver.url);
      expect(endpoint.secret).toMatch(/^whsec_[A-Za-z0-9+/=]{32}$/);
      const listed = await wh.h.app.inject({ method: 'GET', url: '/v1/webhooks', headers });
      expect(listed.body).not.toContain(endpoint.secret);
      expect(listed.body).not.toContain(endpoint.secret.slice(6));

      const e = await hire(wh.h.store, tenant.tenantId, 'sig');
      await e.rename('signed');
      const cursors = await wh.h.feedCursors(headers, 2);
      await waitFor(() => receiver.acknowledged().length >= 2);
      const verifier = new Webhook(endpoint.secret);
      const bodies = receiver.requests.map((r) => {
        const headerMap = {
          'webhook-id': String(r.headers['webhook-id']),
          'webhook-timestamp': String(r.headers['webhook-timestamp']),
          'webhook-signature': String(r.headers['webhook-signature']),
        };
        expect(headerMap['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/=]+$/);
        return verifier.verify(r.body, headerMap) as {
          type: string;
          timestamp: string;
          data: { cursor: string; employee: { firstName: string } };
        };
      });
      expect(receiver.requests.map((r) => r.id)).toEqual(cursors);
      expect(bodies.map((b) => b.type)).toEqual(['employee.hired', 'employee.details_changed']);
      expect(bodies.map((b) => b.data.cursor)).toEqual(cursors);
      expect(bodies[1]?.data.employee.firstName).toBe('signed');
      // A forged body does not verify.
      const first = receiver.requests[0];
      if (!first) throw new Error('no request');
      expect(() =>
        verifier.verify(first.body.replace('employee.hired', 'employee.fired'), {
          'webhook-id': first.id,
          'webhook-timestamp': String(first.headers['webhook-timestamp']),
          'webhook-signature': String(first.headers['webhook-signature']),
        }),
      ).toThrow();
    } finally {
      await receiver.close();
    }
  });
});

describe('when a receiver fails the first 3 attempts', () => {
  it('gets every change exactly once, in order, afterwards; another endpoint is not held up meanwhile', async () => {
    const { tenant, headers } = await admin();
    const flaky = await startReceiver((n) => ({ status: n < 3 ? 500 : 200 }));
    const healthy = await startReceiver();
    try {
      const flakyEndpoint = await register(headers, flaky.url);
      await register(headers, healthy.url);
      const e = await hire(wh.h.store, tenant.tenantId, 'flaky');
      for (let i = 1; i <= 5; i++) await e.rename(`flaky-${i}`);
      const cursors = await wh.h.feedCursors(headers, 6);
      await waitFor(() => healthy.acknowledged().length >= 6);
      await waitFor(() => flaky.acknowledged().length >= 6);
      expect(flaky.requests.slice(0, 4).map((r) => r.id)).toEqual([cursors[0], cursors[0], cursors[0], cursors[0]]);
      expect(flaky.acknowledged()).toEqual(cursors);
      expect(healthy.acknowledged()).toEqual(cursors);
      expect(firstArrivals(flaky.requests.map((r) => r.id)).regressions).toBe(0);

      // The receiver answers before the worker records the attempt: wait for the log to catch up.
      const log = await waitFor(async () => {
        const deliveries = await wh.h.app.inject({ method: 'GET', url: `/v1/webhooks/${flakyEndpoint.id}/deliveries`, headers });
        const data = deliveries.json<{ data: Array<{ cursor: string; status: string; attempts: number; lastStatusCode: number | null }> }>()
          .data;
        return data.filter((d) => d.status === 'succeeded').length === 6 ? data : undefined;
      });
      const firstDelivery = log.find((d) => d.cursor === cursors[0]);
      expect(firstDelivery).toMatchObject({ status: 'succeeded', attempts: 4, lastStatusCode: 200 });
      expect(log.filter((d) => d.status === 'succeeded')).toHaveLength(6);
    } finally {
      await flaky.close();
      await healthy.close();
    }
  });

  it('honours Retry-After and shows the pending retry in the deliveries log', async () => {
    const { tenant, headers } = await admin();
    const receiver = await startReceiver((n) => (n === 0 ? { status: 503, headers: { 'retry-after': '2' } } : { status: 200 }));
    try {
      const endpoint = await register(headers, receiver.url);
      await hire(wh.h.store, tenant.tenantId, 'later');
      await waitFor(() => receiver.requests.length >= 1);
      const log = await waitFor(async () => {
        const r = await wh.h.app.inject({ method: 'GET', url: `/v1/webhooks/${endpoint.id}/deliveries`, headers });
        return r.json<{ data: Array<{ status: string; attempts: number; nextAttemptAt: string | null; lastStatusCode: number }> }>()
          .data[0];
      });
      expect(log).toMatchObject({ status: 'retrying', attempts: 1, lastStatusCode: 503 });
      expect(Date.parse(log.nextAttemptAt ?? '') - (receiver.requests[0]?.at ?? 0)).toBeGreaterThan(1_500);
      await waitFor(() => receiver.acknowledged().length >= 1);
      const [first, second] = receiver.requests;
      expect((second?.at ?? 0) - (first?.at ?? 0)).toBeGreaterThanOrEqual(1_900); // the schedule alone says ~100 ms
    } finally {
      await receiver.close();
    }
  });
});

describe('when a receiver never succeeds, or does not answer in time', () => {
  it('retries on the schedule, then disables the endpoint with the reason; the log says failed', async () => {
    const { tenant, headers } = await admin();
    const receiver = await startReceiver(() => ({ status: 500 }));
    try {
      const endpoint = await register(headers, receiver.url);
      await hire(wh.h.store, tenant.tenantId, 'doomed');
      const disabled = await wh.disabled(headers, endpoint.id);
      expect(disabled.disabledReason).toMatch(/Every retry failed.*HTTP 500/);
      expect(receiver.requests).toHaveLength(1 + FAST_RETRIES.scheduleMs.length);
      const log = (await wh.h.app.inject({ method: 'GET', url: `/v1/webhooks/${endpoint.id}/deliveries`, headers })).json<{
        data: Array<{ status: string; attempts: number }>;
      }>().data;
      expect(log).toEqual([expect.objectContaining({ status: 'failed', attempts: 1 + FAST_RETRIES.scheduleMs.length })]);
    } finally {
      await receiver.close();
    }
  });

  it('counts a response slower than the timeout as a failure and delivers on a later attempt', async () => {
    const { tenant, headers } = await admin();
    // Only the first answer is too slow (the test dispatcher waits 2 s): decided per request, so a
    // retry that starts before the test has looked at the log is answered in time all the same;
    // its answer takes 0.8 s, so the log shows the retry pending for that long at least.
    const receiver = await startReceiver(undefined, { delayMs: (n) => (n === 0 ? 2_500 : 800) });
    try {
      const endpoint = await register(headers, receiver.url);
      await hire(wh.h.store, tenant.tenantId, 'slow');
      const first = await waitFor(async () => {
        const r = await wh.h.app.inject({ method: 'GET', url: `/v1/webhooks/${endpoint.id}/deliveries`, headers });
        return r.json<{ data: Array<{ status: string; lastError: string | null }> }>().data[0];
      });
      expect(first).toMatchObject({ status: 'retrying', lastError: expect.stringMatching(/no answer within 2000 ms|aborted/i) });
      const done = await waitFor(async () => {
        const r = await wh.h.app.inject({ method: 'GET', url: `/v1/webhooks/${endpoint.id}/deliveries`, headers });
        const row = r.json<{ data: Array<{ status: string; attempts: number; lastError: string | null }> }>().data[0];
        return row?.status === 'succeeded' ? row : undefined;
      });
      expect(done).toMatchObject({ attempts: 2, lastError: null });
      const ids = receiver.requests.map((r) => r.id);
      expect(ids).toHaveLength(2);
      expect(ids[0]).toBe(ids[1]); // the same webhook-id on the retry
    } finally {
      await receiver.close();
    }
  });
});

describe('when the receiver answers 410 Gone', () => {
  it('disables the endpoint; replay re-enables it and redelivers from the cursor', async () => {
    const { tenant, headers } = await admin();
    const receiver = await startReceiver(() => ({ status: 410 }));
    try {
      const endpoint = await register(headers, receiver.url);
      const e = await hire(wh.h.store, tenant.tenantId, 'gone');
      await waitFor(() => receiver.requests.length >= 1);
      const disabled = await wh.disabled(headers, endpoint.id);
      expect(disabled.disabledReason).toMatch(/410/);
      await e.rename('after-gone');
      await wh.h.feedCursors(headers, 2);
      // Nothing is scheduled for a disabled endpoint, however many changes come.
      expect((await dueEndpoints(wh.h.db.pool, 10, endpoint.id)).length).toBe(0);
      expect(receiver.requests).toHaveLength(1);

      receiver.setAnswer(() => ({ status: 200 }));
      const replay = await wh.h.app.inject({
        method: 'POST',
        url: `/v1/webhooks/${endpoint.id}/replay`,
        headers,
        payload: { after: endpoint.cursor },
      });
      expect(replay.statusCode).toBe(202);
      const cursors = await wh.h.feedCursors(headers, 2);
      await waitFor(() => receiver.acknowledged().length >= 2);
      expect(receiver.acknowledged()).toEqual(cursors);
    } finally {
      await receiver.close();
    }
  });
});
