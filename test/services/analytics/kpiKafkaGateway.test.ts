import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { START, type EventStore } from '../../../shared/event-store/port.ts';
import { createKafkaClient } from '../../../shared/metrics-bus/kafkaClient.ts';
import { createKafkaPublisher } from '../../../shared/metrics-bus/kafkaPublisher.ts';
import { createKafkaSource } from '../../../shared/metrics-bus/kafkaSource.ts';
import { startKpiConsumer, type KpiConsumerHandle } from '../../../projections/kpi/consumer.ts';
import { kpiBillingProjection } from '../../../projections/kpi/billingProjection.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { createGateway } from '../../../services/gateway/app.ts';
import { analyticsRoutes } from '../../../services/analytics/routes.ts';
import { usageSamples } from '../../../services/analytics/usageSamples.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { authCapabilities, authHeaders, createTestAuth, provisionTenant } from '../../support/auth.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * End to end on the real broker: authenticated requests through the gateway → one usage
 * sample each on a Kafka topic → the KPI consumer group → rollups → GET /v1/analytics/kpi.
 */
const brokers = (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
const topic = `usage-e2e-${randomUUID()}`;
const group = `kpi-e2e-${randomUUID()}`;

let db: TestDatabase;
let store: EventStore;
let auth: AuthDeps;
let app: FastifyInstance;
let consumer: KpiConsumerHandle;
let projector: ProjectorHandle;
const publisher = createKafkaPublisher({ brokers, topic, lingerMs: 5 });
const admin = createKafkaClient(brokers, 'kpi-e2e').admin();

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  auth = await createTestAuth(db.pool);
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 4, replicationFactor: 1 }], waitForLeaders: true });
  projector = runProjection(db.pool, store, kpiBillingProjection, { pollIntervalMs: 50 });
  await waitForCheckpoint(db.pool, kpiBillingProjection.name, START, 20_000);
  consumer = await startKpiConsumer(db.pool, createKafkaSource({ brokers, topic, groupId: group }), group);
  app = await createGateway({
    config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
    readiness: [],
    registry: new Registry(),
    v1: authCapabilities(auth, usageSamples(publisher), analyticsRoutes({ pool: db.pool, store })),
  });
});

afterAll(async () => {
  await app?.close();
  await publisher.close();
  await consumer?.stop();
  await projector?.stop();
  await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
  await admin.disconnect();
  await store?.close();
  await db?.drop();
});

type Kpi = { dau: number; mau: number; apiLatencyP95Ms: number; asOf: string };

describe('usage samples through Kafka', () => {
  describe('when users of two tenants call the API', () => {
    it('shows each tenant exactly its own distinct users, with a latency p95', { timeout: 90_000 }, async () => {
      const [a, b] = [await provisionTenant(db.pool), await provisionTenant(db.pool)];
      const usersA = Array.from({ length: 7 }, () => randomUUID());
      const usersB = Array.from({ length: 3 }, () => randomUUID());
      const started = Date.now();
      for (const [tenant, users] of [
        [a, usersA],
        [b, usersB],
      ] as const) {
        for (const user of users) {
          const headers = await authHeaders(auth, tenant, 'analyst', user);
          for (let i = 0; i < 5; i++) expect((await app.inject({ method: 'GET', url: '/v1/analytics/kpi', headers })).statusCode).toBe(200);
        }
      }
      const read = async (tenant: typeof a, user: string) =>
        (
          await app.inject({ method: 'GET', url: '/v1/analytics/kpi', headers: await authHeaders(auth, tenant, 'analyst', user) })
        ).json<Kpi>();
      const [kpiA, kpiB] = await waitFor(
        async () => {
          const pair = [await read(a, usersA[0]!), await read(b, usersB[0]!)] as const;
          return pair[0].dau >= usersA.length && pair[1].dau >= usersB.length && pair;
        },
        60_000,
        'both tenants’ samples to reach the KPI',
      );
      expect(kpiA).toMatchObject({ dau: usersA.length, mau: usersA.length });
      expect(kpiB).toMatchObject({ dau: usersB.length, mau: usersB.length });
      expect(kpiA.apiLatencyP95Ms).toBeGreaterThan(0);
      expect(Date.parse(kpiA.asOf)).toBeGreaterThanOrEqual(started);
    });
  });
});
