import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePosition, type EventStore } from '../../../shared/event-store/port.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { billingStreamId } from '../../../services/billing/contract.ts';
import { loadRevenueHistories, readRevenueAsOf } from '../../../projections/kpi/revenue.ts';
import { revenueAsOf } from '../../../projections/kpi/subscriptions.ts';
import { withTenant } from '../../../shared/db/pool.ts';
import { kpiBillingProjection } from '../../../projections/kpi/billingProjection.ts';
import { billingEventStoreId, uuidV5 } from '../../../services/billing/ingest.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import type { TestDatabase } from '../../support/database.ts';
import { authHeaders, provisionTenant, type TestTenant } from '../../support/auth.ts';
import { createAnalyticsHarness, type AnalyticsHarness } from '../../support/harness/analytics.ts';

let db: TestDatabase;
let store: EventStore;
let auth: AuthDeps;
let app: FastifyInstance;
let harness: AnalyticsHarness | undefined;

beforeAll(async () => {
  harness = await createAnalyticsHarness();
  ({ db, store, auth, app } = harness);
});

afterAll(async () => {
  await harness?.close();
});

type Kpi = { mrr: number; arr: number; churnRate: number; asOf: string; currency: string | null };
type Ingested = { accepted: number; duplicates: number; position: string | null };
type Problem = { status: number; errors?: { path: string; message: string }[] };

const DAY = 86_400_000;
const daysAgo = (n: number) => new Date(Date.now() - n * DAY).toISOString();

const event = (customerId: string, overrides: Record<string, unknown> = {}) => ({
  eventId: `evt_1NG8${randomUUID().replace(/-/g, '').slice(0, 20)}`,
  type: 'subscription.started',
  customerId,
  amount: '50',
  currency: 'EUR',
  interval: 'month',
  occurredAt: daysAgo(10),
  ...overrides,
});

async function post(tenant: TestTenant, events: readonly object[]) {
  const headers = await authHeaders(auth, tenant, 'admin');
  return app.inject({ method: 'POST', url: '/v1/analytics/billing-events', headers, payload: { events } });
}

/** The KPI once the billing projection has applied `position` (read-your-writes). */
async function kpiAfter(tenant: TestTenant, position: string): Promise<Kpi> {
  const parsed = parsePosition(position);
  if (!parsed) throw new Error(`bad position ${position}`);
  expect(await waitForCheckpoint(db.pool, kpiBillingProjection.name, parsed, 10_000)).toBe(true);
  const headers = await authHeaders(auth, tenant, 'analyst');
  const response = await app.inject({ method: 'GET', url: '/v1/analytics/kpi', headers: { ...headers, 'x-min-position': position } });
  expect(response.statusCode).toBe(200);
  return response.json<Kpi>();
}

const recorded = async (tenant: TestTenant, customerId: string) =>
  (await store.readStream(billingStreamId(tenant.tenantId, customerId))).length;

describe('billing event store ids', () => {
  it('are RFC 9562 version-5 uuids (the RFC test vector)', () => {
    expect(uuidV5('6ba7b810-9dad-11d1-80b4-00c04fd430c8', 'www.example.com')).toBe('2ed6657d-e927-568b-95e1-2665a8aea6a2');
  });

  it('differ between tenants for one provider id, and are stable within one', () => {
    const [a, b] = [randomUUID(), randomUUID()];
    expect(billingEventStoreId(a, 'evt_1')).not.toBe(billingEventStoreId(b, 'evt_1'));
    expect(billingEventStoreId(a, 'evt_1')).toBe(billingEventStoreId(a, 'evt_1'));
  });
});

describe('billing ids (regression: Stripe evt_… ids were refused)', () => {
  describe('when a tenant sends Stripe event ids', () => {
    it('accepts evt_… ids (202) and any printable id of up to 255 characters', async () => {
      const tenant = await provisionTenant(db.pool);
      const response = await post(tenant, [
        event('cus-1', { eventId: 'evt_1NG8Du2eZvKYlo2CUI7nBXBD' }),
        event('cus-2', { eventId: `ünïcødé ${'x'.repeat(247)}` }),
      ]);
      expect(response.statusCode).toBe(202);
      expect(response.json<Ingested>()).toMatchObject({ accepted: 2, duplicates: 0 });
    });

    it('documents the id in the OpenAPI document as a printable string, not a uuid', async () => {
      const doc = (await app.inject({ url: '/v1/openapi.json' })).json<{
        paths: Record<string, { post?: { requestBody: { content: Record<string, { schema: unknown }> } } }>;
      }>();
      const body = JSON.stringify(doc.paths['/v1/analytics/billing-events']?.post?.requestBody.content['application/json']?.schema);
      expect(body).toContain('eventId');
      expect(body).not.toContain('"format":"uuid"');
      expect(body).toContain('evt_');
    });

    it('refuses an empty id, 256 characters, a control character or a lone surrogate (400 naming the field)', async () => {
      const tenant = await provisionTenant(db.pool);
      for (const eventId of ['', 'x'.repeat(256), 'evt_\u0000', 'evt_\n1', 'evt_\ud800']) {
        const response = await post(tenant, [event('cus-1', { eventId })]);
        expect(response.statusCode, JSON.stringify(eventId)).toBe(400);
        expect(JSON.stringify(response.json<Problem>().errors)).toContain('eventId');
      }
      expect(await recorded(tenant, 'cus-1')).toBe(0);
    });
  });

  describe('when two tenants use the same provider id', () => {
    it('records it for each (no 409, nothing learnt about the other tenant) and keeps their KPIs apart', async () => {
      const [a, b] = [await provisionTenant(db.pool), await provisionTenant(db.pool)];
      const shared = 'evt_1NG8SharedAcrossTenants';
      const first = await post(b, [event('cus-1', { eventId: shared, amount: '100' })]);
      expect(first.statusCode).toBe(202);
      const second = await post(a, [event('cus-1', { eventId: shared, amount: '30' })]);
      expect(second.statusCode).toBe(202);
      expect(second.json<Ingested>()).toMatchObject({ accepted: 1, duplicates: 0 });
      expect((await kpiAfter(a, second.json<Ingested>().position!)).mrr).toBe(30);
      expect((await kpiAfter(b, second.json<Ingested>().position!)).mrr).toBe(100);
    });
  });

  describe('when retries overlap ([E1, E2] then [E2, E3])', () => {
    it('acknowledges E2 as a duplicate and appends E3 (no spurious 409)', async () => {
      const tenant = await provisionTenant(db.pool);
      const [e1, e2, e3] = [event('cus-1'), event('cus-2'), event('cus-3')];
      const first = await post(tenant, [e1, e2]);
      expect(first.json<Ingested>()).toMatchObject({ accepted: 2, duplicates: 0 });
      const second = await post(tenant, [e2, e3]);
      expect(second.statusCode).toBe(202);
      expect(second.json<Ingested>()).toMatchObject({ accepted: 1, duplicates: 1 });
      expect((await kpiAfter(tenant, second.json<Ingested>().position!)).mrr).toBe(150);
    });

    it('also holds when both retries run at the same time: both 202, each event recorded once', async () => {
      const tenant = await provisionTenant(db.pool);
      const [e1, e2, e3] = [event('cus-1'), event('cus-2'), event('cus-3')];
      const [a, b] = await Promise.all([post(tenant, [e1, e2]), post(tenant, [e2, e3])]);
      expect([a.statusCode, b.statusCode]).toEqual([202, 202]);
      expect([await recorded(tenant, 'cus-1'), await recorded(tenant, 'cus-2'), await recorded(tenant, 'cus-3')]).toEqual([1, 1, 1]);
      await kpiAfter(tenant, a.json<Ingested>().position!);
      expect((await kpiAfter(tenant, b.json<Ingested>().position!)).mrr).toBe(150);
    });

    it('treats the same payload with an equal amount written differently as the same event (49.9 = "49.90")', async () => {
      const tenant = await provisionTenant(db.pool);
      const e = event('cus-1', { amount: '49.90', occurredAt: '2026-01-01T01:00:00+01:00' });
      expect((await post(tenant, [e])).statusCode).toBe(202);
      const again = await post(tenant, [{ ...e, amount: 49.9, occurredAt: '2026-01-01T00:00:00Z' }]);
      expect(again.json<Ingested>()).toMatchObject({ accepted: 0, duplicates: 1 });
    });
  });

  describe('when a seen id comes back with a different payload', () => {
    it('refuses the whole batch with 409 naming the event, and records none of it', async () => {
      const tenant = await provisionTenant(db.pool);
      const e1 = event('cus-1');
      expect((await post(tenant, [e1])).statusCode).toBe(202);
      const e4 = event('cus-4');
      const response = await post(tenant, [e4, { ...e1, amount: '99' }]);
      expect(response.statusCode).toBe(409);
      expect(response.headers['content-type']).toContain('application/problem+json');
      expect(response.json<Problem>().errors).toEqual([expect.objectContaining({ path: 'events.1.eventId' })]);
      expect(await recorded(tenant, 'cus-4')).toBe(0);
      // The client fixes the batch and retries: E4 is new, E1 a duplicate.
      const retry = await post(tenant, [e4, e1]);
      expect(retry.json<Ingested>()).toMatchObject({ accepted: 1, duplicates: 1 });
    });

    it('refuses one id used twice in a batch with two payloads (409), recording nothing', async () => {
      const tenant = await provisionTenant(db.pool);
      const e = event('cus-1');
      const response = await post(tenant, [event('cus-2'), e, { ...e, type: 'subscription.cancelled' }]);
      expect(response.statusCode).toBe(409);
      expect(response.json<Problem>().errors).toEqual([expect.objectContaining({ path: 'events.2.eventId' })]);
      expect(await recorded(tenant, 'cus-1')).toBe(0);
      expect(await recorded(tenant, 'cus-2')).toBe(0);
    });

    it('refuses an id already recorded for another customer of the tenant (409), recording none of the batch', async () => {
      const tenant = await provisionTenant(db.pool);
      const e = event('cus-1');
      expect((await post(tenant, [e])).statusCode).toBe(202);
      const response = await post(tenant, [event('cus-3'), { ...e, customerId: 'cus-2' }]);
      expect(response.statusCode).toBe(409);
      expect(await recorded(tenant, 'cus-2')).toBe(0);
      expect(await recorded(tenant, 'cus-3')).toBe(0); // one atomic multi-stream append: all or nothing
    });
  });
});

describe('billing events out of order', () => {
  describe('when a cancellation arrives before the start it ends', () => {
    it('still ends the subscription: MRR counts only the other customer, churn counts it', async () => {
      const tenant = await provisionTenant(db.pool);
      await post(tenant, [event('cus-b', { amount: '20', occurredAt: daysAgo(60) })]);
      const cancel = await post(tenant, [event('cus-a', { type: 'subscription.cancelled', occurredAt: daysAgo(5) })]);
      expect(cancel.statusCode).toBe(202);
      const start = await post(tenant, [event('cus-a', { amount: '50', occurredAt: daysAgo(20) })]);
      expect(start.statusCode).toBe(202);
      const kpi = await kpiAfter(tenant, start.json<Ingested>().position!);
      // cus-a: [−20 d, −5 d) → not active now; churned in the window; new in the window.
      expect(kpi).toMatchObject({ mrr: 20, arr: 240, churnRate: 0.5 });
    });
  });

  describe('when an upgrade arrives before the start, in another batch', () => {
    it('applies it on top of the start (MRR = upgraded plan)', async () => {
      const tenant = await provisionTenant(db.pool);
      await post(tenant, [event('cus-a', { type: 'subscription.changed', amount: '80', occurredAt: daysAgo(3) })]);
      const start = await post(tenant, [event('cus-a', { amount: '50', occurredAt: daysAgo(9) })]);
      expect((await kpiAfter(tenant, start.json<Ingested>().position!)).mrr).toBe(80);
    });
  });
});

describe('revenue as of an instant, from the stored history', () => {
  it('gives the same answer from readRevenueAsOf (one instant) and revenueAsOf over loaded histories (series)', async () => {
    const tenant = await provisionTenant(db.pool);
    const response = await post(tenant, [
      event('a', { amount: '10', occurredAt: daysAgo(90) }),
      event('a', { type: 'subscription.changed', amount: '30', occurredAt: daysAgo(60) }),
      event('b', { amount: '120', interval: 'year', occurredAt: daysAgo(45) }),
      event('a', { type: 'subscription.cancelled', occurredAt: daysAgo(20) }),
      event('c', { amount: '5', occurredAt: daysAgo(10) }),
      event('b', { type: 'subscription.cancelled', occurredAt: daysAgo(2) }),
    ]);
    await kpiAfter(tenant, response.json<Ingested>().position!);
    const instants = [100, 75, 50, 30, 15, 5, 1, 0].map((d) => new Date(Date.now() - d * DAY));
    await withTenant(db.pool, tenant.tenantId, async (tx) => {
      const histories = await loadRevenueHistories(tx, tenant.tenantId, { from: instants[0]!, to: instants.at(-1)! });
      for (const at of instants)
        expect(await readRevenueAsOf(tx, tenant.tenantId, at), at.toISOString()).toEqual(revenueAsOf(histories, at));
      expect((await readRevenueAsOf(tx, tenant.tenantId, instants[3]!)).mrr).toBe(40); // a at 30 + b 120/12
      expect((await readRevenueAsOf(tx, tenant.tenantId, instants.at(-1)!)).mrr).toBe(5);
    });
  });
});

describe('inputs that would stall the billing projection', () => {
  describe('when occurredAt is outside the years 1970–9999', () => {
    it('refuses year 0, 1969 and an offset that normalises to year 10000 with 400 naming occurredAt', async () => {
      const tenant = await provisionTenant(db.pool);
      for (const occurredAt of ['0000-06-01T00:00:00Z', '1969-12-31T23:59:59Z', '9999-12-31T23:00:00-05:00']) {
        const response = await post(tenant, [event('cus-1', { occurredAt })]);
        expect(response.statusCode, occurredAt).toBe(400);
        expect(JSON.stringify(response.json<Problem>().errors)).toContain('occurredAt');
      }
      expect(await recorded(tenant, 'cus-1')).toBe(0);
    });

    it('accepts the edges 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z', async () => {
      const tenant = await provisionTenant(db.pool);
      const response = await post(tenant, [
        event('cus-1', { occurredAt: '1970-01-01T00:00:00Z' }),
        event('cus-2', { occurredAt: '9999-12-31T23:59:59Z' }),
      ]);
      expect(response.statusCode).toBe(202);
      expect((await kpiAfter(tenant, response.json<Ingested>().position!)).mrr).toBe(50);
    });
  });

  describe('when the log already holds a billing event from year 0 (recorded before the edge refused it)', () => {
    it('skips it and applies the events after it, for every tenant', async () => {
      const [tenant, other] = [await provisionTenant(db.pool), await provisionTenant(db.pool)];
      await store.append(billingStreamId(tenant.tenantId, 'cus-0'), [
        {
          id: randomUUID(),
          type: 'SubscriptionStarted',
          data: { customerId: 'cus-0', amount: '10', currency: 'EUR', interval: 'month', occurredAt: '0000-06-01T00:00:00.000Z' },
          metadata: { tenantId: tenant.tenantId },
        },
      ]);
      const after = await post(other, [event('cus-1', { amount: '25' })]);
      expect((await kpiAfter(other, after.json<Ingested>().position!)).mrr).toBe(25);
      expect((await kpiAfter(tenant, after.json<Ingested>().position!)).mrr).toBe(0);
    });
  });

  describe('when a batch says started(T1), cancelled(T2), started(T1) for one customer', () => {
    it('is applied (no duplicate period key), deterministically, and later events of other tenants still apply', async () => {
      const [tenant, other] = [await provisionTenant(db.pool), await provisionTenant(db.pool)];
      const [t1, t2] = [daysAgo(10), daysAgo(4)];
      const response = await post(tenant, [
        event('cus-1', { occurredAt: t1 }),
        event('cus-1', { type: 'subscription.cancelled', occurredAt: t2 }),
        event('cus-1', { amount: '70', occurredAt: t1 }),
      ]);
      expect(response.statusCode).toBe(202);
      // Folded as started, started (plan change), cancelled: one period [T1, T2), churned.
      expect(await kpiAfter(tenant, response.json<Ingested>().position!)).toMatchObject({ mrr: 0, churnRate: 1 });
      const after = await post(other, [event('cus-9', { amount: '10' })]);
      expect((await kpiAfter(other, after.json<Ingested>().position!)).mrr).toBe(10);
    });
  });
});
