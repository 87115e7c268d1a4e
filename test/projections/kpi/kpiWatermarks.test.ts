import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { START, type EventStore } from '../../../shared/event-store/port.ts';
import { createInProcessBus } from '../../../shared/metrics-bus/inProcess.ts';
import { createKafkaClient } from '../../../shared/metrics-bus/kafkaClient.ts';
import { createKafkaPublisher } from '../../../shared/metrics-bus/kafkaPublisher.ts';
import { createKafkaSource } from '../../../shared/metrics-bus/kafkaSource.ts';
import type { UsageSample } from '../../../shared/metrics-bus/port.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { kpiBillingProjection } from '../../../projections/kpi/billingProjection.ts';
import { startKpiConsumer, type KpiConsumerHandle } from '../../../projections/kpi/consumer.ts';
import { readKpiSummary } from '../../../projections/kpi/query.ts';
import { seriesInstants } from '../../../shared/series/intervals.ts';
import { readKpiSeries, readKpiSummaryAt } from '../../../projections/kpi/series.ts';
import { createUsageRollupSink } from '../../../projections/kpi/usageRollup.ts';
import { ingestBillingEvents, type BillingEventInput } from '../../../services/billing/ingest.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { provisionTenant } from '../../support/auth.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * The KPI `asOf` is the instant up to which every input has been applied, taken from
 * the pipelines' progress against the head of their logs — not from one tenant's last request,
 * and not from a bounded scan of the event log.
 */
const HOUR = 3_600_000;
const DAY = 86_400_000;

let db: TestDatabase;
let store: EventStore;
let projector: ProjectorHandle | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
  // A small filtered-scan window, so "far behind" (more than one window) takes 200 events, not 10,000.
  store = createPostgresEventStore(db.pool, { listenUrl: db.url, scanWindow: 50 });
  projector = runProjection(db.pool, store, kpiBillingProjection, { pollIntervalMs: 50 });
  expect(await waitForCheckpoint(db.pool, kpiBillingProjection.name, START, 20_000)).toBe(true);
});

afterAll(async () => {
  await projector?.stop();
  await store?.close();
  await db?.drop();
});

const sample = (tenantId: string, userId: string, timestamp: number): UsageSample => ({
  tenantId,
  userId,
  route: '/v1/employees',
  method: 'GET',
  status: 200,
  durationMs: 12,
  timestamp,
});

const billing = (customerId: string, overrides: Partial<BillingEventInput> = {}): BillingEventInput => ({
  eventId: `evt_${randomUUID()}`,
  type: 'subscription.started',
  customerId,
  amount: '40',
  currency: 'EUR',
  interval: 'month',
  occurredAt: new Date(Date.now() - 3 * DAY).toISOString(),
  ...overrides,
});

const tenantSamples = (tenantId: string) =>
  db.pool.maybeOneFirst(sql.type(z.object({ samples: z.number() }))`select samples from kpi_tenant_usage where tenant_id = ${tenantId}`);

describe('KPI asOf and watermarks', () => {
  describe('when the billing projector is far behind (more than one scan window of other events)', () => {
    it('holds asOf before the first unapplied billing event, and MRR/churn as of that asOf; catching up moves asOf to now', async () => {
      const { tenantId } = await provisionTenant(db.pool);
      const first = await ingestBillingEvents(store, tenantId, 'test', [billing('cus-1')]);
      expect(await waitForCheckpoint(db.pool, kpiBillingProjection.name, first.position!, 10_000)).toBe(true);
      await projector?.stop();
      projector = undefined;

      // 200 events of other types (4 scan windows), then a billing event the projector has not seen.
      for (let i = 0; i < 20; i++) {
        await store.append(
          `noise-${randomUUID()}`,
          Array.from({ length: 10 }, () => ({ id: randomUUID(), type: 'NoiseRecorded', data: {} })),
        );
      }
      const late = await ingestBillingEvents(store, tenantId, 'test', [billing('cus-2', { amount: '60' })]);
      const [lateEvent] = await store.readStream(`billing-${tenantId}-cus-2`);
      const behind = await readKpiSummary({ pool: db.pool, eventStore: store }, tenantId);
      expect(Date.parse(behind.asOf)).toBeLessThan(Date.parse(lateEvent!.recordedAt));
      expect(behind.mrr).toBe(40);

      projector = runProjection(db.pool, store, kpiBillingProjection, { pollIntervalMs: 50 });
      expect(await waitForCheckpoint(db.pool, kpiBillingProjection.name, late.position!, 10_000)).toBe(true);
      const before = Date.now();
      const caughtUp = await readKpiSummary({ pool: db.pool, eventStore: store }, tenantId);
      expect(Date.parse(caughtUp.asOf)).toBeGreaterThanOrEqual(Date.parse(lateEvent!.recordedAt));
      expect(Date.parse(caughtUp.asOf)).toBeGreaterThanOrEqual(before - 2_000);
      expect(caughtUp.mrr).toBe(100);
    });
  });

  describe('when the billing projector lags and `at` lies between the horizon and now', () => {
    it('answers kpi?at= from the hour rollups: a user whose only request came after `at` is not counted', async () => {
      const { tenantId } = await provisionTenant(db.pool);
      await projector?.stop();
      projector = undefined;
      const pending = await ingestBillingEvents(store, tenantId, 'test', [billing('cus-lag')]);
      try {
        const [event] = await store.readStream(`billing-${tenantId}-cus-lag`);
        const horizon = Date.parse(event!.recordedAt) - 1; // 1 ms before the unapplied billing event
        await new Promise((resolve) => setTimeout(resolve, 50));
        const now = Date.now();
        const at = now - 20;
        await createUsageRollupSink(db.pool, { group: `g-${randomUUID()}` }).apply({
          origin: null,
          samples: [sample(tenantId, 'u-before', now - 2 * HOUR), sample(tenantId, 'u-after', now - 10)],
        });
        const deps = { pool: db.pool, eventStore: store };
        const atThen = await readKpiSummaryAt(deps, tenantId, at, now);
        expect(Date.parse(atThen.asOf)).toBe(horizon);
        expect(atThen).toMatchObject({ dau: 1, mau: 1 }); // u-after's only request is after `at`
        // At the route's clock nothing after `at` can exist yet: the summary now, with both users.
        expect(await readKpiSummaryAt(deps, tenantId, now, now)).toMatchObject({ dau: 2, mau: 2 });
      } finally {
        projector = runProjection(db.pool, store, kpiBillingProjection, { pollIntervalMs: 50 });
        expect(await waitForCheckpoint(db.pool, kpiBillingProjection.name, pending.position!, 10_000)).toBe(true);
      }
    });
  });

  describe('when a tenant has been idle for two hours (in-process bus)', () => {
    it('gets asOf ≈ now, with dau/mau/p95 over the windows ending at asOf', async () => {
      const { tenantId } = await provisionTenant(db.pool);
      const bus = createInProcessBus();
      await bus.source.start(createUsageRollupSink(db.pool, { group: 'in-process' }));
      try {
        const now = Date.now();
        bus.publisher.publish(sample(tenantId, 'u-recent', now - 2 * HOUR));
        bus.publisher.publish(sample(tenantId, 'u-old', now - 2 * DAY));
        await bus.publisher.flush();
        await waitFor(async () => (await tenantSamples(tenantId)) === 2, 30_000);
        const before = Date.now();
        const kpi = await readKpiSummary({ pool: db.pool, eventStore: store, usage: { source: bus.source } }, tenantId);
        expect(Date.parse(kpi.asOf)).toBeGreaterThanOrEqual(before - 2_000);
        expect(kpi).toMatchObject({ dau: 1, mau: 2 });
        expect(kpi.apiLatencyP95Ms).toBeGreaterThan(0);
      } finally {
        await bus.source.stop();
      }
    });
  });

  describe('with Kafka', () => {
    const brokers = (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
    const topic = `usage-watermark-${randomUUID()}`;
    const group = `kpi-watermark-${randomUUID()}`;
    const admin = createKafkaClient(brokers, 'kpi-watermark-test').admin();
    const publisher = createKafkaPublisher({ brokers, topic, lingerMs: 5 });
    // The gateway's view: a source it never starts, asked only for the topic head.
    const head = createKafkaSource({ brokers, topic, groupId: group });
    let consumer: KpiConsumerHandle | undefined;

    beforeAll(async () => {
      await admin.connect();
      await admin.createTopics({ topics: [{ topic, numPartitions: 1, replicationFactor: 1 }], waitForLeaders: true });
    });

    afterAll(async () => {
      await publisher.close();
      await consumer?.stop();
      await head.stop();
      await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
      await admin.disconnect();
    });

    it(
      'gives an idle tenant asOf ≈ now when the consumer has applied the whole topic, and holds asOf back while it has not',
      { timeout: 90_000 },
      async () => {
        const [idle, busy] = [await provisionTenant(db.pool), await provisionTenant(db.pool)];
        const usage = { source: head, group };
        const now = Date.now();
        publisher.publish(sample(idle.tenantId, 'u-1', now - 2 * HOUR));
        await publisher.flush();
        consumer = await startKpiConsumer(db.pool, createKafkaSource({ brokers, topic, groupId: group }), group);
        await waitFor(async () => (await tenantSamples(idle.tenantId)) === 1, 60_000);

        const before = Date.now();
        const fresh = await readKpiSummary({ pool: db.pool, eventStore: store, usage }, idle.tenantId);
        expect(Date.parse(fresh.asOf)).toBeGreaterThanOrEqual(before - 2_000);
        expect(fresh).toMatchObject({ dau: 1, mau: 1 });
        expect(fresh.apiLatencyP95Ms).toBeGreaterThan(0);

        // The consumer stops; another tenant's sample reaches the topic unapplied: every tenant's
        // asOf falls back to what the partition has applied (the idle tenant's sample, 2 h ago).
        await consumer.stop();
        consumer = undefined;
        const endOf = async () => [...(await head.head()).partitions.values()][0]?.high;
        const end = await endOf();
        publisher.publish(sample(busy.tenantId, 'u-2', Date.now()));
        await publisher.flush();
        await waitFor(async () => (await endOf()) !== end, 30_000); // the head (reused ≤ 250 ms) shows the new message
        const held = await readKpiSummary({ pool: db.pool, eventStore: store, usage }, idle.tenantId);
        expect(Date.parse(held.asOf)).toBe(now - 2 * HOUR);
        // The same holds for the summary at an instant and for the usage series: they never claim
        // an instant whose samples are not all applied. The revenue series waits for billing only.
        const heldAt = await readKpiSummaryAt({ pool: db.pool, eventStore: store, usage }, idle.tenantId, Date.now());
        expect(Date.parse(heldAt.asOf)).toBe(now - 2 * HOUR);
        // A range up to an hour ahead reaches the horizon: its last point is the open bucket, at asOf.
        const range = { from: Date.now() - 5 * HOUR, to: Date.now() + HOUR };
        const instants = seriesInstants(range.from, range.to, 'hour') ?? [];
        const dau = (await readKpiSeries({ pool: db.pool, eventStore: store, usage }, idle.tenantId, {
          metric: 'dau',
          interval: 'hour',
          ...range,
        }))!;
        expect(Date.parse(dau.asOf)).toBe(now - 2 * HOUR);
        expect(dau.points.map((p) => p.at)).toEqual(
          [...instants.filter((t) => t <= now - 2 * HOUR), now - 2 * HOUR].map((t) => new Date(t).toISOString()),
        );
        expect(dau.points.at(-1)).toEqual({ at: dau.asOf, value: 1, partial: true });
        const mrr = (await readKpiSeries({ pool: db.pool, eventStore: store, usage }, idle.tenantId, {
          metric: 'mrr',
          interval: 'hour',
          ...range,
        }))!;
        // Billing is caught up: every boundary up to now, then the open bucket at now.
        expect(mrr.points.filter((p) => !p.partial)).toHaveLength(instants.filter((t) => t <= Date.parse(mrr.asOf)).length);
        expect(mrr.points.at(-1)).toMatchObject({ at: mrr.asOf, partial: true });
      },
    );
  });
});
