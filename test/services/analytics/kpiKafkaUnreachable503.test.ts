import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { START, type EventStore } from '../../../shared/event-store/port.ts';
import { ServiceUnavailableError } from '../../../shared/errors.ts';
import { createKafkaSource } from '../../../shared/metrics-bus/kafkaSource.ts';
import { kpiBillingProjection } from '../../../projections/kpi/billingProjection.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { analyticsRoutes } from '../../../services/analytics/routes.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { authHeaders, createTestApp, createTestAuth, provisionTenant } from '../../support/auth.ts';
import { freePort } from '../../support/processes.ts';

/**
 * Regression: with the metrics bus unreachable, the KPI summary (and usage series) answered 500:
 * the usage watermark asks Kafka for the topic head and kafkajs's connection errors
 * (KafkaJSNumberOfRetriesExceeded ← KafkaJSConnectionError, code ENOTFOUND or none for a
 * connection timeout) were not recognised as a dependency being down. It must be a 503 with Retry-After.
 */
let db: TestDatabase;
let store: EventStore;
let auth: AuthDeps;
let projector: ProjectorHandle;

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  auth = await createTestAuth(db.pool);
  projector = runProjection(db.pool, store, kpiBillingProjection, { pollIntervalMs: 50 });
  await waitForCheckpoint(db.pool, kpiBillingProjection.name, START, 20_000);
});

afterAll(async () => {
  await projector?.stop();
  await store?.close();
  await db?.drop();
});

const unreachable = async () =>
  [
    ['a closed port', `127.0.0.1:${await freePort()}`],
    ['an unresolvable host', `kafka-${randomUUID().slice(0, 8)}.invalid:9092`],
  ] as const;

describe('when the Kafka broker is unreachable', () => {
  it('the source says so with a ServiceUnavailableError when asked for the topic head', async () => {
    for (const [, broker] of await unreachable()) {
      const source = createKafkaSource({ brokers: [broker], topic: `usage-${randomUUID()}`, groupId: `g-${randomUUID()}` });
      try {
        const head = await source.head().then(
          () => undefined,
          (error: unknown) => error,
        );
        expect(head).toBeInstanceOf(ServiceUnavailableError);
        expect((head as ServiceUnavailableError).headers['retry-after']).toBeDefined();
      } finally {
        await source.stop();
      }
    }
  });

  it('GET /v1/analytics/kpi and a usage series answer 503 with Retry-After, as problems', { timeout: 60_000 }, async () => {
    for (const [what, broker] of await unreachable()) {
      const source = createKafkaSource({ brokers: [broker], topic: `usage-${randomUUID()}`, groupId: `g-${randomUUID()}` });
      let app: FastifyInstance | undefined;
      try {
        app = await createTestApp(auth, analyticsRoutes({ pool: db.pool, store, usage: { source } }));
        const tenant = await provisionTenant(db.pool);
        const headers = await authHeaders(auth, tenant, 'analyst');
        const to = new Date().toISOString();
        const from = new Date(Date.now() - 3 * 3_600_000).toISOString();
        for (const url of ['/v1/analytics/kpi', `/v1/analytics/kpi/series?metric=dau&interval=hour&from=${from}&to=${to}`]) {
          const response = await app.inject({ method: 'GET', url, headers });
          expect({ what, url, status: response.statusCode }).toEqual({ what, url, status: 503 });
          expect(response.headers['retry-after']).toMatch(/^\d+$/);
          expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
          const problem = response.json<{ status: number; type: string; detail: string }>();
          expect(problem).toMatchObject({ status: 503, type: '/problems/service-unavailable' });
          // No broker address or kafkajs internals leak into the answer.
          expect(problem.detail).not.toContain(broker.split(':')[0]!);
          expect(response.body).not.toMatch(/KafkaJS/);
        }
        // The revenue KPIs do not read Kafka: they still answer.
        const mrr = await app.inject({
          method: 'GET',
          url: `/v1/analytics/kpi/series?metric=mrr&interval=hour&from=${from}&to=${to}`,
          headers,
        });
        expect(mrr.statusCode).toBe(200);
      } finally {
        await app?.close();
        await source.stop();
      }
    }
  });
});
