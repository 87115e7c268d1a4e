import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { START, type EventStore } from '../../../shared/event-store/port.ts';
import { createInProcessBus } from '../../../shared/metrics-bus/inProcess.ts';
import type { UsageSamplePublisher, UsageSampleSource } from '../../../shared/metrics-bus/port.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { kpiBillingProjection } from '../../../projections/kpi/billingProjection.ts';
import { createUsageRollupSink } from '../../../projections/kpi/usageRollup.ts';
import { analyticsRoutes } from '../../../services/analytics/routes.ts';
import { usageSamples } from '../../../services/analytics/usageSamples.ts';
import { billingRoutes } from '../../../services/billing/routes.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { authHeaders, createTestApp, createTestAuth, provisionTenant, type TestTenant } from '../../support/auth.ts';
import type { Kpi } from '../../support/harness/analytics.ts';
import { waitFor } from '../../support/waitFor.ts';

let db: TestDatabase;
let store: EventStore;
let auth: AuthDeps;
let app: FastifyInstance;
let projector: ProjectorHandle;
let bus: { publisher: UsageSamplePublisher; source: UsageSampleSource };

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  auth = await createTestAuth(db.pool);
  bus = createInProcessBus();
  await bus.source.start(createUsageRollupSink(db.pool, { group: 'test' }));
  projector = runProjection(db.pool, store, kpiBillingProjection, { pollIntervalMs: 50 });
  await waitForCheckpoint(db.pool, kpiBillingProjection.name, START, 20_000);
  app = await createTestApp(
    auth,
    usageSamples(bus.publisher),
    analyticsRoutes({ pool: db.pool, store, readWaitMs: 5_000 }),
    billingRoutes({ store }),
  );
});

afterAll(async () => {
  await app?.close();
  await projector?.stop();
  await bus?.source.stop();
  await store?.close();
  await db?.drop();
});

const billingEvent = (customerId: string, overrides: Record<string, unknown> = {}) => ({
  eventId: randomUUID(),
  type: 'subscription.started',
  customerId,
  amount: '49.99',
  currency: 'EUR',
  interval: 'month',
  occurredAt: new Date(Date.now() - 86_400_000).toISOString(),
  ...overrides,
});

/** The first value of `read` that is `done`; on timeout the last one, for the assertion to show. */
const until = <T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 10_000): Promise<T> =>
  waitFor(async () => {
    const value = await read();
    return done(value) && { value };
  }, timeoutMs).then(({ value }) => value, read);

describe('POST /v1/analytics/billing-events', () => {
  let tenant: TestTenant;
  beforeAll(async () => {
    tenant = await provisionTenant(db.pool);
  });

  describe('when an admin sends a valid batch', () => {
    it('accepts it (202), and a retry of the same batch is all duplicates', async () => {
      const headers = await authHeaders(auth, tenant, 'admin');
      const events = [
        billingEvent('cus-1'),
        billingEvent('cus-2', { amount: 120, interval: 'year' }),
        billingEvent('cus-1', { type: 'subscription.changed', amount: '59.99' }),
      ];
      const first = await app.inject({ method: 'POST', url: '/v1/analytics/billing-events', headers, payload: { events } });
      expect(first.statusCode).toBe(202);
      expect(first.json()).toMatchObject({ accepted: 3, duplicates: 0 });
      const position = first.json<{ position: string }>().position;
      expect(first.headers['x-log-position']).toBe(position);

      const again = await app.inject({ method: 'POST', url: '/v1/analytics/billing-events', headers, payload: { events } });
      expect(again.statusCode).toBe(202);
      expect(again.json()).toMatchObject({ accepted: 0, duplicates: 3, position });

      // Read-your-writes: MRR = 59.99 (cus-1 after the change) + 120 / 12 = 69.99.
      const kpi = await app.inject({ method: 'GET', url: '/v1/analytics/kpi', headers: { ...headers, 'x-min-position': position } });
      expect(kpi.statusCode).toBe(200);
      expect(kpi.headers['x-consistency']).toBe('consistent');
      expect(kpi.json<Kpi>()).toMatchObject({ mrr: 69.99, arr: 839.88, churnRate: 0, currency: 'EUR' });
      // Without a position the read neither waits nor says anything of its consistency.
      const plain = await app.inject({ method: 'GET', url: '/v1/analytics/kpi', headers });
      expect(plain.statusCode).toBe(200);
      expect(plain.headers['x-consistency']).toBeUndefined();
    });
  });

  describe('when the batch is not acceptable', () => {
    it('refuses another currency than the tenant bills in (422)', async () => {
      const headers = await authHeaders(auth, tenant, 'admin');
      const response = await app.inject({
        method: 'POST',
        url: '/v1/analytics/billing-events',
        headers,
        payload: { events: [billingEvent('cus-9', { currency: 'USD' })] },
      });
      expect(response.statusCode).toBe(422);
      expect(response.headers['content-type']).toContain('application/problem+json');
    });

    it('refuses more than 1,000 events, bad amounts and unknown types (400)', async () => {
      const headers = await authHeaders(auth, tenant, 'admin');
      const tooMany = Array.from({ length: 1_001 }, (_, i) => billingEvent(`c${i}`));
      for (const events of [
        tooMany,
        [billingEvent('c', { amount: '-1' })],
        [billingEvent('c', { amount: '1.23456' })],
        [billingEvent('c', { type: 'subscription.paused' })],
        [billingEvent('c', { eventId: '' })],
      ]) {
        const response = await app.inject({ method: 'POST', url: '/v1/analytics/billing-events', headers, payload: { events } });
        expect(response.statusCode).toBe(400);
      }
    });

    it('is for admins only (analyst → 403)', async () => {
      const headers = await authHeaders(auth, tenant, 'analyst');
      const response = await app.inject({
        method: 'POST',
        url: '/v1/analytics/billing-events',
        headers,
        payload: { events: [billingEvent('c')] },
      });
      expect(response.statusCode).toBe(403);
    });
  });
});

describe('GET /v1/analytics/kpi', () => {
  describe('when a fresh tenant has no billing and only these requests', () => {
    it('counts each distinct user once in dau and mau, with a p95 from the sketches', async () => {
      const tenant = await provisionTenant(db.pool);
      const users = [randomUUID(), randomUUID(), randomUUID()];
      for (const user of users) {
        const headers = await authHeaders(auth, tenant, 'analyst', user);
        for (let i = 0; i < 3; i++) expect((await app.inject({ method: 'GET', url: '/v1/analytics/kpi', headers })).statusCode).toBe(200);
      }
      const headers = await authHeaders(auth, tenant, 'analyst', users[0]);
      const kpi = await until(
        async () => (await app.inject({ method: 'GET', url: '/v1/analytics/kpi', headers })).json<Kpi>(),
        (k) => k.dau === 3,
      );
      expect(kpi).toMatchObject({ dau: 3, mau: 3, mrr: 0, arr: 0, churnRate: 0, currency: null });
      expect(kpi.apiLatencyP95Ms).toBeGreaterThan(0);
      expect(Date.parse(kpi.asOf)).toBeLessThanOrEqual(Date.now());
    });

    it('is refused to the employee role (403) and without a token (401)', async () => {
      const tenant = await provisionTenant(db.pool);
      const employee = await app.inject({ method: 'GET', url: '/v1/analytics/kpi', headers: await authHeaders(auth, tenant, 'employee') });
      expect(employee.statusCode).toBe(403);
      const anonymous = await app.inject({ method: 'GET', url: '/v1/analytics/kpi', headers: { 'x-tenant': tenant.slug } });
      expect(anonymous.statusCode).toBe(401);
    });

    it('does not show one tenant the users of another', async () => {
      const [a, b] = [await provisionTenant(db.pool), await provisionTenant(db.pool)];
      const ha = await authHeaders(auth, a, 'admin');
      await app.inject({ method: 'GET', url: '/v1/analytics/kpi', headers: ha });
      await until(
        async () => (await app.inject({ method: 'GET', url: '/v1/analytics/kpi', headers: ha })).json<Kpi>(),
        (k) => k.dau === 1,
      );
      const kb = (await app.inject({ method: 'GET', url: '/v1/analytics/kpi', headers: await authHeaders(auth, b, 'admin') })).json<Kpi>();
      expect(kb.dau).toBe(0);
    });
  });
});
