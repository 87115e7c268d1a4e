import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../shared/config.ts';
import { START } from '../../../shared/event-store/port.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { kpiBillingProjection } from '../../../projections/kpi/billingProjection.ts';
import { analyticsRoutes } from '../../../services/analytics/routes.ts';
import { usageSamples } from '../../../services/analytics/usageSamples.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { createRuntime, type Runtime } from '../../../services/runtime.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { authHeaders, createTestApp, createTestAuth, provisionTenant } from '../../support/auth.ts';
import { createMemoryLogger, type LogLine } from '../../support/logs.ts';

/**
 * A gateway running as its own process without KAFKA_BROKERS (`npm start -- gateway`, as the
 * write bench runs it): no KPI consumer can ever read its usage samples. It used the in-process
 * transport anyway, so it kept every sample in memory (up to 100,000, each surviving into the old
 * generation), and GET /v1/analytics/kpi answered with
 * `asOf` stuck at the first request's sample, since a buffered sample counts as pending.
 * The runtime as the gateway role builds it (`usageConsumedHere: false`), on real PostgreSQL.
 */
let db: TestDatabase;
let runtime: Runtime;
let auth: AuthDeps;
let app: FastifyInstance;
let projector: ProjectorHandle;
let logged: LogLine[];

beforeAll(async () => {
  db = await createTestDatabase();
  const { logger, lines } = createMemoryLogger('warn');
  logged = lines;
  runtime = await createRuntime(loadConfig({ DATABASE_URL: db.url, LOG_LEVEL: 'warn' }), logger, { usageConsumedHere: false });
  auth = await createTestAuth(runtime.pool);
  projector = runProjection(runtime.pool, runtime.eventStore, kpiBillingProjection, { pollIntervalMs: 50 });
  await waitForCheckpoint(runtime.pool, kpiBillingProjection.name, START, 20_000);
  // Wired as services/processes/gateway.ts wires it: the runtime's publisher, and its source for asOf.
  app = await createTestApp(
    auth,
    usageSamples(runtime.usage.publisher),
    analyticsRoutes({ pool: runtime.pool, store: runtime.eventStore, usage: { source: runtime.usage.source } }),
  );
});

afterAll(async () => {
  await app?.close();
  await projector?.stop();
  await runtime?.close();
  await db?.drop();
});

type Kpi = { asOf: string };

const metricValue = async (name: string, labels: Record<string, string> = {}) => {
  const metric = await runtime.registry.getSingleMetric(name)?.get();
  const match = metric?.values.find((v) => Object.entries(labels).every(([k, value]) => v.labels[k] === value));
  return match?.value ?? 0;
};

describe('when a gateway runs on its own without Kafka', () => {
  it('says once that its usage samples are dropped', () => {
    expect(runtime.usage.transport).toBe('none');
    expect(logged.filter((line) => line.msg?.includes('usage samples are dropped'))).toHaveLength(1);
  });

  it('keeps none of its usage samples, counting each as dropped', async () => {
    const tenant = await provisionTenant(runtime.pool);
    const headers = await authHeaders(auth, tenant, 'analyst', randomUUID());
    const before = await metricValue('usage_samples_dropped_total', { reason: 'no_consumer' });
    for (let i = 0; i < 5; i++) expect((await app.inject({ method: 'GET', url: '/v1/analytics/kpi', headers })).statusCode).toBe(200);
    // Each authenticated request publishes its sample in an onResponse hook.
    await expect.poll(async () => (await metricValue('usage_samples_dropped_total', { reason: 'no_consumer' })) - before).toBe(5);
    // Nothing pending (the old bus kept the samples for a consumer: the oldest one's timestamp).
    expect(runtime.usage.source.oldestPending?.()).toBeNull();
  });

  it('answers the KPI summary as of now, not as of its first request', async () => {
    const tenant = await provisionTenant(runtime.pool);
    const headers = await authHeaders(auth, tenant, 'analyst', randomUUID());
    const first = await app.inject({ method: 'GET', url: '/v1/analytics/kpi', headers });
    expect(first.statusCode).toBe(200);
    const firstAnswered = Date.now();
    // More requests until the clock has moved past the first answer (a few ms; the old code's
    // asOf stayed at the first request's sample however long this went on).
    while (Date.now() <= firstAnswered + 5)
      expect((await app.inject({ method: 'GET', url: '/v1/analytics/kpi', headers })).statusCode).toBe(200);
    const lastAsked = Date.now();
    const last = await app.inject({ method: 'GET', url: '/v1/analytics/kpi', headers });
    expect(last.statusCode).toBe(200);
    expect(Date.parse(last.json<Kpi>().asOf)).toBeGreaterThanOrEqual(lastAsked);
  });
});

describe('when every part runs in one process without Kafka (the embedded default)', () => {
  it('keeps usage samples in process for the KPI consumer it runs', async () => {
    const other = await createRuntime(loadConfig({ DATABASE_URL: db.url, LOG_LEVEL: 'silent' }), pino({ level: 'silent' }));
    try {
      expect(other.usage.transport).toBe('in-process');
      const timestamp = Date.now();
      other.usage.publisher.publish({
        tenantId: randomUUID(),
        userId: randomUUID(),
        route: '/v1/employees',
        method: 'GET',
        status: 200,
        durationMs: 3,
        timestamp,
      });
      // Pending until the consumer (started by the all role's projectors) applies it.
      expect(other.usage.source.oldestPending?.()).toBe(timestamp);
    } finally {
      await other.close();
    }
  });
});
