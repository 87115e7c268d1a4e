import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authHeaders } from '../../support/auth.ts';
import { staysTrue } from '../../support/staysTrue.ts';
import { createChangesHarness, hire, type ChangesHarness } from '../../support/harness/changes.ts';
import { waitFor } from '../../support/waitFor.ts';
import { webhooksCapability } from '../../../services/webhooks/capability.ts';
import { startWebhookDispatcher, type WebhookDispatcher } from '../../../services/webhooks/dispatcher.ts';
import { createSecretBox } from '../../../services/webhooks/secrets.ts';
import { inProcessTriggers, type DrainJob } from '../../../services/webhooks/triggers.ts';
import { firstArrivals, startReceiver } from '../../support/webhooks/receiver.ts';

/**
 * Webhooks without Redis (the all-in-one process on the embedded default): the same dispatcher,
 * its drains triggered in-process instead of by BullMQ jobs. Real PostgreSQL and HTTP receivers.
 */
const secrets = createSecretBox(randomBytes(32));

let h: ChangesHarness;
let dispatcher: WebhookDispatcher;

/** A dispatcher without Redis on the harness's database: its drains run in this process. */
const startInProcessDispatcher = () =>
  startWebhookDispatcher({
    pool: h.db.pool,
    databaseUrl: h.db.url,
    prefix: 'unused-without-redis',
    secrets,
    targets: { allowHosts: ['127.0.0.1'] },
    retry: { scheduleMs: [300, 300, 300], jitter: 0, maxRetryAfterMs: 5_000 },
    timeoutMs: 2_000,
    sweepEveryMs: 60_000, // only the changes projection's NOTIFY and the retry timers drive it
  });

beforeAll(async () => {
  h = await createChangesHarness((db) => webhooksCapability({ pool: db.pool, secrets, targets: { allowHosts: ['127.0.0.1'] } }));
  dispatcher = await startInProcessDispatcher();
});
afterAll(async () => {
  await dispatcher?.close();
  await h?.close();
});

async function endpointFor(url: string) {
  const { tenant } = await h.tenant();
  const headers = await authHeaders(h.auth, tenant, 'admin');
  const response = await h.app.inject({
    method: 'POST',
    url: '/v1/webhooks',
    headers,
    payload: { url, events: ['employee.hired', 'employee.details_changed'] },
  });
  expect(response.statusCode, response.body).toBe(201);
  return { tenant, headers, endpoint: response.json<{ id: string }>() };
}

describe('when no Redis is configured', () => {
  it('delivers every change in order, and retries a failing receiver at its retry time', async () => {
    const healthy = await startReceiver();
    const flaky = await startReceiver((n) => ({ status: n < 2 ? 500 : 200 }));
    try {
      const a = await endpointFor(healthy.url);
      const b = await endpointFor(flaky.url);
      const ea = await hire(h.store, a.tenant.tenantId, 'inproc-a');
      const eb = await hire(h.store, b.tenant.tenantId, 'inproc-b');
      for (let i = 1; i <= 4; i++) {
        await ea.rename(`a-${i}`);
        await eb.rename(`b-${i}`);
      }
      const [cursorsA, cursorsB] = [await h.feedCursors(a.headers, 5), await h.feedCursors(b.headers, 5)];
      await waitFor(() => healthy.acknowledged().length >= 5);
      await waitFor(() => flaky.acknowledged().length >= 5);
      expect(healthy.acknowledged()).toEqual(cursorsA);
      expect(flaky.acknowledged()).toEqual(cursorsB);
      // The first change three times (two failures, then its retry timer's success), never out of order.
      expect(flaky.requests.slice(0, 3).map((r) => r.id)).toEqual([cursorsB[0], cursorsB[0], cursorsB[0]]);
      expect((flaky.requests[2]?.at ?? 0) - (flaky.requests[1]?.at ?? 0)).toBeGreaterThanOrEqual(250);
      expect(firstArrivals(flaky.requests.map((r) => r.id)).regressions).toBe(0);
      const log = await waitFor(async () => {
        const r = await h.app.inject({ method: 'GET', url: `/v1/webhooks/${b.endpoint.id}/deliveries`, headers: b.headers });
        const data = r.json<{ data: Array<{ cursor: string; status: string; attempts: number }> }>().data;
        return data.filter((d) => d.status === 'succeeded').length === 5 ? data : undefined;
      });
      expect(log.find((d) => d.cursor === cursorsB[0])).toMatchObject({ status: 'succeeded', attempts: 3 });
    } finally {
      await healthy.close();
      await flaky.close();
    }
  });
});

describe('when the dispatcher closes in the middle of a backlog', () => {
  it('stops after the delivery in flight, and the next one delivers the rest in order, nothing lost', async () => {
    const receiver = await startReceiver(undefined, { delayMs: 150 });
    try {
      const { tenant, headers } = await endpointFor(receiver.url);
      const e = await hire(h.store, tenant.tenantId, 'backlog');
      for (let i = 1; i < 30; i++) await e.rename(`backlog-${i}`);
      const cursors = await h.feedCursors(headers, 30);
      await waitFor(() => receiver.acknowledged().length >= 3);
      const closing = Date.now();
      await dispatcher.close();
      // One delivery (150 ms) in flight at most, not the ~25 left (about 4 s).
      expect(Date.now() - closing).toBeLessThan(1_500);
      const delivered = receiver.acknowledged().length;
      expect(delivered).toBeLessThan(30);
      expect(await staysTrue(() => receiver.acknowledged().length === delivered, 500)).toBe(true); // nothing after close

      // Its first sweep (at start) finds the endpoint's backlog.
      dispatcher = await startInProcessDispatcher();
      await waitFor(() => firstArrivals(receiver.acknowledged()).order.length >= 30, 30_000);
      expect(firstArrivals(receiver.acknowledged()).order).toEqual(cursors);
      expect(firstArrivals(receiver.requests.map((r) => r.id)).regressions).toBe(0);
    } finally {
      await receiver.close();
    }
  });
});

describe('in-process triggers', () => {
  const job = (endpointId: string): DrainJob => ({ endpointId, tenantId: 't' });
  const gate = () => {
    let open!: () => void;
    const opened = new Promise<void>((resolve) => (open = resolve));
    return { open, opened };
  };

  it('run at most `concurrency` drains at once, one per endpoint, and once more, behind those waiting, for a trigger that came meanwhile', async () => {
    const started: string[] = [];
    const gates = new Map<string, ReturnType<typeof gate>>();
    const triggers = inProcessTriggers(
      async ({ endpointId }) => {
        started.push(endpointId);
        const g = gate();
        gates.set(endpointId, g);
        await g.opened;
      },
      { concurrency: 2 },
    );
    await triggers.addBulk([job('a'), job('b'), job('c'), job('a')].map((j) => ({ job: j, stateSeen: 'none-0-0' })));
    expect(started).toEqual(['a', 'b']); // c waits for a slot; the second a is owed to the running one
    gates.get('a')?.open();
    await waitFor(() => started.length === 3);
    expect(started).toEqual(['a', 'b', 'c']); // c waited: the owed run of a goes behind it
    gates.get('b')?.open();
    await waitFor(() => started.length === 4);
    expect(started).toEqual(['a', 'b', 'c', 'a']);
    // Owed again while nobody waits: it runs again in its slot at once.
    await triggers.add(job('a'));
    gates.get('a')?.open();
    await waitFor(() => started.length === 5);
    expect(started.at(-1)).toBe('a');
    gates.get('a')?.open();
    gates.get('c')?.open();
    await triggers.close();
    expect(started).toEqual(['a', 'b', 'c', 'a', 'a']);
  });

  it('run a delayed trigger at its time, and none after close', async () => {
    const started: number[] = [];
    const triggers = inProcessTriggers(async () => void started.push(Date.now()), { concurrency: 1 });
    const at = Date.now();
    await triggers.add(job('a'), { delayMs: 200 });
    await triggers.add(job('b'), { delayMs: 10_000 });
    await waitFor(() => started.length === 1);
    expect((started[0] ?? 0) - at).toBeGreaterThanOrEqual(190);
    await triggers.close();
    await triggers.add(job('c'));
    expect(started).toHaveLength(1);
  });
});
