import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authHeaders, createTestApp } from '../../support/auth.ts';
import { expectProblem } from '../../support/harness/employees.ts';
import { createChangesHarness, hire, type ChangesHarness } from '../../support/harness/changes.ts';
import { waitFor } from '../../support/waitFor.ts';
import { webhooksCapability } from '../../../services/webhooks/capability.ts';
import { startWebhookDispatcher, type WebhookDispatcher } from '../../../services/webhooks/dispatcher.ts';
import { createSecretBox } from '../../../services/webhooks/secrets.ts';
import { dueEndpoints } from '../../../services/webhooks/store.ts';
import { decodeCursor, encodeCursor } from '../../../services/changes/cursor.ts';
import { changesProjection } from '../../../projections/changes/changesProjection.ts';
import { listParkedEvents, retryParkedEvents } from '../../../projections/runner/parking.ts';
import { replayProjection } from '../../../projections/runner/runner.ts';
import { sql } from '../../../shared/db/pool.ts';
import { START, comparePositions } from '../../../shared/event-store/port.ts';
import { sqlAt } from '../../support/database.ts';
import { firstArrivals, startReceiver } from '../../support/webhooks/receiver.ts';

const secrets = createSecretBox(randomBytes(32));
const FAST_RETRIES = { scheduleMs: [100, 100, 100, 100, 100, 100], jitter: 0.2, maxRetryAfterMs: 5_000 };

let h: ChangesHarness;
let dispatcher: WebhookDispatcher;
let strictApp: FastifyInstance;

beforeAll(async () => {
  h = await createChangesHarness((db) => webhooksCapability({ pool: db.pool, secrets, targets: { allowHosts: ['127.0.0.1'] } }));
  dispatcher = await startWebhookDispatcher({
    pool: h.db.pool,
    databaseUrl: h.db.url,
    redisUrl: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
    prefix: `test-wh-${randomBytes(4).toString('hex')}`,
    secrets,
    targets: { allowHosts: ['127.0.0.1'] },
    retry: FAST_RETRIES,
    timeoutMs: 2_000,
    sweepEveryMs: 250,
    trimEveryMs: 250, // the default 30-day retention; the retention tests age entries
  });
  // The same capability with no allow-list: what production looks like.
  strictApp = await createTestApp(h.auth, webhooksCapability({ pool: h.db.pool, secrets, targets: { allowHosts: [] } }));
});
afterAll(async () => {
  await strictApp?.close();
  await dispatcher?.close();
  await h?.close();
});

async function admin() {
  const { tenant } = await h.tenant();
  return { tenant, headers: await authHeaders(h.auth, tenant, 'admin') };
}

type FeedPage = { data: Array<{ cursor: string; type: string; employeeId: string; employee: { firstName: string } }>; next: string };
const read = async (headers: Record<string, string>, query: string) => {
  const response = await h.app.inject({ method: 'GET', url: `/v1/employees/changes?${query}`, headers });
  if (response.statusCode !== 200) throw new Error(`${response.statusCode} ${response.body}`);
  return response.json<FeedPage>();
};

async function register(headers: Record<string, string>, url: string, events = ['employee.hired', 'employee.details_changed']) {
  const response = await h.app.inject({ method: 'POST', url: '/v1/webhooks', headers, payload: { url, events } });
  if (response.statusCode !== 201) throw new Error(`${response.statusCode} ${response.body}`);
  return response.json<{ id: string; secret: string; cursor: string; status: string }>();
}

describe('when changes happen for a registered endpoint', () => {
  it('delivers them signed per Standard Webhooks, verifiable with the standardwebhooks library', async () => {
    const { tenant, headers } = await admin();
    const receiver = await startReceiver();
    try {
      const endpoint = await register(headers, receiver.url);
      expect(endpoint.secret).toMatch(/^whsec_[A-Za-z0-9+/=]{32}$/);
      const listed = await h.app.inject({ method: 'GET', url: '/v1/webhooks', headers });
      expect(listed.body).not.toContain(endpoint.secret);
      expect(listed.body).not.toContain(endpoint.secret.slice(6));

      const e = await hire(h.store, tenant.tenantId, 'sig');
      await e.rename('signed');
      const cursors = await h.feedCursors(headers, 2);
      await waitFor(() => receiver.acknowledged().length >= 2);
      const verifier = new Webhook(endpoint.secret);
      const bodies = receiver.requests.map((r) => {
        const headerMap = { 'webhook-id': String(r.headers['webhook-id']), 'webhook-timestamp': String(r.headers['webhook-timestamp']), 'webhook-signature': String(r.headers['webhook-signature']) };
        expect(headerMap['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/=]+$/);
        return verifier.verify(r.body, headerMap) as { type: string; timestamp: string; data: { cursor: string; employee: { firstName: string } } };
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
      const e = await hire(h.store, tenant.tenantId, 'flaky');
      for (let i = 1; i <= 5; i++) await e.rename(`flaky-${i}`);
      const cursors = await h.feedCursors(headers, 6);
      await waitFor(() => healthy.acknowledged().length >= 6);
      await waitFor(() => flaky.acknowledged().length >= 6);
      expect(flaky.requests.slice(0, 4).map((r) => r.id)).toEqual([cursors[0], cursors[0], cursors[0], cursors[0]]);
      expect(flaky.acknowledged()).toEqual(cursors);
      expect(healthy.acknowledged()).toEqual(cursors);
      expect(firstArrivals(flaky.requests.map((r) => r.id)).regressions).toBe(0);

      // The receiver answers before the worker records the attempt: wait for the log to catch up.
      const log = await waitFor(async () => {
        const deliveries = await h.app.inject({ method: 'GET', url: `/v1/webhooks/${flakyEndpoint.id}/deliveries`, headers });
        const data = deliveries.json<{ data: Array<{ cursor: string; status: string; attempts: number; lastStatusCode: number | null }> }>().data;
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
      await hire(h.store, tenant.tenantId, 'later');
      await waitFor(() => receiver.requests.length >= 1);
      const log = await waitFor(async () => {
        const r = await h.app.inject({ method: 'GET', url: `/v1/webhooks/${endpoint.id}/deliveries`, headers });
        return r.json<{ data: Array<{ status: string; attempts: number; nextAttemptAt: string | null; lastStatusCode: number }> }>().data[0];
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
      await hire(h.store, tenant.tenantId, 'doomed');
      const disabled = await waitFor(async () => {
        const list = (await h.app.inject({ method: 'GET', url: '/v1/webhooks', headers })).json<{ data: Array<{ id: string; status: string; disabledReason: string | null }> }>();
        const found = list.data.find((w) => w.id === endpoint.id);
        return found?.status === 'disabled' ? found : undefined;
      });
      expect(disabled.disabledReason).toMatch(/Every retry failed.*HTTP 500/);
      expect(receiver.requests).toHaveLength(1 + FAST_RETRIES.scheduleMs.length);
      const log = (await h.app.inject({ method: 'GET', url: `/v1/webhooks/${endpoint.id}/deliveries`, headers })).json<{ data: Array<{ status: string; attempts: number }> }>().data;
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
      await hire(h.store, tenant.tenantId, 'slow');
      const first = await waitFor(async () => {
        const r = await h.app.inject({ method: 'GET', url: `/v1/webhooks/${endpoint.id}/deliveries`, headers });
        return r.json<{ data: Array<{ status: string; lastError: string | null }> }>().data[0];
      });
      expect(first).toMatchObject({ status: 'retrying', lastError: expect.stringMatching(/no answer within 2000 ms|aborted/i) });
      const done = await waitFor(async () => {
        const r = await h.app.inject({ method: 'GET', url: `/v1/webhooks/${endpoint.id}/deliveries`, headers });
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
      const e = await hire(h.store, tenant.tenantId, 'gone');
      await waitFor(() => receiver.requests.length >= 1);
      const disabled = await waitFor(async () => {
        const list = (await h.app.inject({ method: 'GET', url: '/v1/webhooks', headers })).json<{ data: Array<{ id: string; status: string; disabledReason: string | null }> }>();
        const found = list.data.find((w) => w.id === endpoint.id);
        return found?.status === 'disabled' ? found : undefined;
      });
      expect(disabled.disabledReason).toMatch(/410/);
      await e.rename('after-gone');
      await h.feedCursors(headers, 2);
      // Nothing is scheduled for a disabled endpoint, however many changes come.
      expect((await dueEndpoints(h.db.pool, 10, endpoint.id)).length).toBe(0);
      expect(receiver.requests).toHaveLength(1);

      receiver.setAnswer(() => ({ status: 200 }));
      const replay = await h.app.inject({ method: 'POST', url: `/v1/webhooks/${endpoint.id}/replay`, headers, payload: { after: endpoint.cursor } });
      expect(replay.statusCode).toBe(202);
      const cursors = await h.feedCursors(headers, 2);
      await waitFor(() => receiver.acknowledged().length >= 2);
      expect(receiver.acknowledged()).toEqual(cursors);
    } finally {
      await receiver.close();
    }
  });
});

describe('when a change is parked and applied after the fix, by `projections retry` or by a rebuild', () => {
  const applyAfterFix = {
    retry: async () =>
      expect(await retryParkedEvents(h.db.pool, changesProjection, { employee_changes: sql.identifier(['employee_changes']) })).toEqual({ retried: 2, stillParked: 0 }),
    // A rebuild (here `projections replay`; a version bump does the same) applies the events
    // parked in the live model last, in its swap.
    rebuild: async () => expect((await replayProjection(h.db.pool, h.store, changesProjection)).parked).toBe(0),
  };
  it.each(['retry', 'rebuild'] as const)('%s: feed readers and webhook endpoints already past its log position get it next, then its stream’s later change, once each', async (mode) => {
    const { tenant, headers } = await admin();
    const receiver = await startReceiver();
    // The "bug": the feed's table refuses one employee state, so applying the change fails
    // deterministically (23514) and the runner parks it, and the later change of its stream.
    const constraint = `poison_${randomBytes(4).toString('hex')}`;
    try {
      const endpoint = await register(headers, receiver.url);
      const x = await hire(h.store, tenant.tenantId, 'x');
      const y = await hire(h.store, tenant.tenantId, 'y');
      await h.feedCursors(headers, 2);
      await sqlAt(h.db.url, `alter table employee_changes add constraint ${constraint} check (employee->>'firstName' <> 'poison-${tenant.tenantId}') not valid`);
      await x.rename(`poison-${tenant.tenantId}`);
      await x.rename('x-after');
      await y.rename('y-after');
      const parked = await waitFor(async () => {
        const rows = await listParkedEvents(h.db.pool, changesProjection.name, { status: 'parked' });
        return rows.length >= 2 ? rows : undefined;
      });
      expect(parked.map((p) => p.tenantId)).toEqual([tenant.tenantId, tenant.tenantId]);

      // A reader (and the endpoint) past both parked changes' log positions: x, y hired, y-after.
      const seen = await h.feedCursors(headers, 3);
      const before = await read(headers, 'limit=1000');
      expect(before.data.map((c) => c.employee.firstName)).toEqual(['x-0', 'y-0', 'y-after']);
      await waitFor(() => receiver.acknowledged().length >= 3);
      const parkedPositions = parked.map((p) => encodeCursor(p.event.position));
      const readerAt = decodeCursor(before.next) ?? START;
      expect(parked.every((p) => comparePositions(p.event.position, readerAt) < 0)).toBe(true);
      // It waits at the end of the feed while the operator fixes and retries.
      const waiting = read(headers, `after=${before.next}&wait=20`);

      await sqlAt(h.db.url, `alter table employee_changes drop constraint ${constraint}`);
      await applyAfterFix[mode]();

      const woken = await waiting;
      expect(woken.data.map((c) => [c.cursor, c.type, c.employeeId, c.employee.firstName])).toEqual([
        [parkedPositions[0], 'employee.details_changed', x.employeeId, `poison-${tenant.tenantId}`],
        [parkedPositions[1], 'employee.details_changed', x.employeeId, 'x-after'],
      ]);
      expect((await read(headers, `after=${woken.next}`)).data).toEqual([]);
      // From the start: every change once, in the order applied.
      expect((await read(headers, 'limit=1000')).data.map((c) => c.cursor)).toEqual([...seen, ...parkedPositions]);
      await waitFor(() => receiver.acknowledged().length >= 5);
      expect(receiver.acknowledged()).toEqual([...seen, ...parkedPositions]);
      // A new endpoint starts after the last change applied, not at the newest log position.
      const later = await register(headers, receiver.url);
      expect(later.cursor).toBe(parkedPositions[1]);
      expect(await listParkedEvents(h.db.pool, changesProjection.name, { status: 'parked' })).toEqual([]);

      // A rebuild later applies them at the same point again: the order and every cursor into it
      // stay as they were, and the endpoint has nothing new (no y-after again).
      const applied = (await read(headers, 'limit=1000')).data.map((c) => c.cursor);
      await replayProjection(h.db.pool, h.store, changesProjection);
      expect((await read(headers, 'limit=1000')).data.map((c) => c.cursor)).toEqual(applied);
      expect((await read(headers, `after=${before.next}`)).data.map((c) => c.cursor)).toEqual(parkedPositions);
      expect(await dueEndpoints(h.db.pool, 10, endpoint.id)).toEqual([]);
    } finally {
      await sqlAt(h.db.url, `alter table employee_changes drop constraint if exists ${constraint}`);
      await receiver.close();
    }
  });
});

type LogEntry = { cursor: string; status: string; attempts: number; lastAttemptAt: string; nextAttemptAt: string | null };

describe("the delivery log's retention (30 days after an entry's last attempt by default)", () => {
  const deliveryLog = async (headers: Record<string, string>, endpointId: string) =>
    (await h.app.inject({ method: 'GET', url: `/v1/webhooks/${endpointId}/deliveries`, headers })).json<{ data: LogEntry[] }>().data;
  const age = (endpointId: string, days: number) =>
    sqlAt(h.db.url, `update webhook_deliveries set last_attempt_at = last_attempt_at - make_interval(days => $2) where endpoint_id = $1`, [endpointId, days]);

  it('drops older entries on its schedule and keeps the recent ones', async () => {
    const { tenant, headers } = await admin();
    const receiver = await startReceiver();
    try {
      const endpoint = await register(headers, receiver.url);
      const e = await hire(h.store, tenant.tenantId, 'kept');
      await e.rename('kept-1');
      const old = await h.feedCursors(headers, 2);
      await waitFor(async () => ((await deliveryLog(headers, endpoint.id)).length === 2 ? true : undefined));
      await age(endpoint.id, 31);
      await e.rename('kept-2');
      const cursors = await h.feedCursors(headers, 3);
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
      expect(await dispatcher.trim()).toBe(0);
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
      await hire(h.store, tenant.tenantId, 'pending');
      const [entry] = await waitFor(async () => {
        const entries = await deliveryLog(headers, endpoint.id);
        return entries[0]?.status === 'retrying' ? entries : undefined;
      });
      // The retry moves an hour out (the endpoint's own schedule too, so nothing attempts it meanwhile), and its first attempt 40 days back.
      await sqlAt(h.db.url, `update webhook_endpoints set next_attempt_at = now() + interval '1 hour' where id = $1`, [endpoint.id]);
      await sqlAt(h.db.url, `update webhook_deliveries set next_attempt_at = now() + interval '1 hour' where endpoint_id = $1`, [endpoint.id]);
      await age(endpoint.id, 40);
      expect(await dispatcher.trim()).toBe(0);
      expect(await deliveryLog(headers, endpoint.id)).toEqual([expect.objectContaining({ cursor: entry?.cursor, status: 'retrying', attempts: 1 })]);

      // A retrying entry whose next attempt is long past (left behind, e.g. by a replay past it) goes.
      // (The dispatcher's schedule may get there first: then this call finds nothing left.)
      await sqlAt(h.db.url, `update webhook_deliveries set next_attempt_at = now() - interval '39 days' where endpoint_id = $1`, [endpoint.id]);
      expect(await dispatcher.trim()).toBeLessThanOrEqual(1);
      expect(await deliveryLog(headers, endpoint.id)).toEqual([]);
    } finally {
      await receiver.close();
    }
  });
});

describe('when a target is loopback, private, link-local or metadata and not allow-listed', () => {
  it('refuses to register it (422), after resolving names', async () => {
    const { headers } = await admin();
    for (const url of [
      'https://127.0.0.1/hook',
      'https://10.1.2.3/hook',
      'https://169.254.169.254/latest/meta-data',
      'https://[::1]/hook',
      'https://localhost/hook',
      'http://example.com/hook',
      'ftp://example.com/hook',
      'https://user:pw@example.com/hook',
    ]) {
      const response = await strictApp.inject({ method: 'POST', url: '/v1/webhooks', headers, payload: { url, events: ['employee.hired'] } });
      expectProblem(response, 422);
    }
  });

  it('refuses a NUL or lone surrogate in the URL with a 400 naming it, never a 500', async () => {
    const { headers } = await admin();
    for (const url of ['http://127.0.0.1:9/a\u0000b', 'http://127.0.0.1:9/a\ud800']) {
      const response = await h.app.inject({ method: 'POST', url: '/v1/webhooks', headers, payload: { url, events: ['employee.hired'] } });
      const problem = expectProblem(response, 400);
      expect(problem.errors).toEqual(expect.arrayContaining([expect.objectContaining({ path: 'body.url' })]));
    }
  });

  it('stores a URL as normalised (percent-encoded by the URL parser)', async () => {
    const { headers } = await admin();
    const response = await h.app.inject({ method: 'POST', url: '/v1/webhooks', headers, payload: { url: 'http://127.0.0.1:9/a b/é', events: ['employee.hired'] } });
    expect(response.statusCode).toBe(201);
    expect(response.json<{ url: string }>().url).toBe('http://127.0.0.1:9/a%20b/%C3%A9');
  });

  it('is described in the OpenAPI document', async () => {
    const doc = (await h.app.inject({ method: 'GET', url: '/v1/openapi.json' })).json<{ paths: Record<string, unknown> }>();
    for (const path of ['/v1/employees/changes', '/v1/webhooks', '/v1/webhooks/{id}', '/v1/webhooks/{id}/deliveries', '/v1/webhooks/{id}/replay']) {
      expect(Object.keys(doc.paths)).toContain(path);
    }
  });

  it('needs webhooks:manage (admin)', async () => {
    const { tenant } = await h.tenant();
    const hr = await authHeaders(h.auth, tenant, 'hr_manager');
    expectProblem(await h.app.inject({ method: 'GET', url: '/v1/webhooks', headers: hr }), 403);
  });
});
