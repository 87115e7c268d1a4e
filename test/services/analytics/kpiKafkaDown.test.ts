import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createKafkaPublisher } from '../../../shared/metrics-bus/kafkaPublisher.ts';
import { createGateway, type V1Capability } from '../../../services/gateway/app.ts';
import { usageSamples } from '../../../services/analytics/usageSamples.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { authCapabilities, authHeaders, createTestAuth, provisionTenant } from '../../support/auth.ts';
import { freePort } from '../../support/processes.ts';

/**
 * Kafka unreachable: the gateway's publisher points at a port nobody listens on. Requests must
 * succeed as fast as with a healthy broker, and the samples that do not fit the bounded buffer
 * are dropped (oldest first) and counted in /metrics.
 */
const brokers = (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
const CAPACITY = 500;
const REQUESTS = 3_000;

let db: TestDatabase;
let auth: AuthDeps;

const ping: V1Capability = async (scope) => {
  scope.get('/ping', { config: { permission: 'roles:read' } }, async () => ({ ok: true }));
};

async function gatewayWith(kafkaBrokers: readonly string[], capacity?: number) {
  const registry = new Registry();
  const publisher = createKafkaPublisher({
    brokers: kafkaBrokers,
    topic: `usage-down-${randomUUID()}`,
    registry,
    batchSize: 200,
    ...(capacity ? { capacity } : {}),
  });
  const app = await createGateway({
    config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
    readiness: [],
    registry,
    v1: authCapabilities(auth, usageSamples(publisher), ping),
  });
  return { app, publisher };
}

type Timing = { statuses: Set<number>; durations: number[] };

async function timeRequests(app: FastifyInstance, headers: Record<string, string>, into: Timing, count: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    const started = performance.now();
    const response = await app.inject({ method: 'GET', url: '/v1/ping', headers });
    into.durations.push(performance.now() - started);
    into.statuses.add(response.statusCode);
  }
}

const percentile = (t: Timing, q: number) => {
  const sorted = [...t.durations].sort((a, b) => a - b);
  return sorted[Math.floor(q * (sorted.length - 1))]!;
};

beforeAll(async () => {
  db = await createTestDatabase();
  auth = await createTestAuth(db.pool);
});

afterAll(async () => {
  await db?.drop();
});

describe('usage samples while Kafka is unreachable', () => {
  it('keeps requests succeeding at unchanged latency and counts the dropped samples', { timeout: 120_000 }, async () => {
    const tenant = await provisionTenant(db.pool);
    const headers = await authHeaders(auth, tenant, 'employee');
    const healthy = await gatewayWith(brokers);
    const down = await gatewayWith([`127.0.0.1:${await freePort()}`], CAPACITY);
    try {
      // Warm both (JIT, token cache) before measuring.
      for (const { app } of [healthy, down]) for (let i = 0; i < 200; i++) await app.inject({ method: 'GET', url: '/v1/ping', headers });

      // Alternate in rounds so load from other processes on the machine hits both alike.
      const healthyTiming: Timing = { statuses: new Set(), durations: [] };
      const downTiming: Timing = { statuses: new Set(), durations: [] };
      for (let round = 0; round < REQUESTS / 250; round++) {
        await timeRequests(healthy.app, headers, healthyTiming, 250);
        await timeRequests(down.app, headers, downTiming, 250);
      }
      const withKafka = { statuses: healthyTiming.statuses, p50: percentile(healthyTiming, 0.5), p95: percentile(healthyTiming, 0.95) };
      const withoutKafka = { statuses: downTiming.statuses, p50: percentile(downTiming, 0.5), p95: percentile(downTiming, 0.95) };
      process.stdout.write(
        `[kafka-down] p50 ${withKafka.p50.toFixed(3)} → ${withoutKafka.p50.toFixed(3)} ms, p95 ${withKafka.p95.toFixed(3)} → ${withoutKafka.p95.toFixed(3)} ms\n`,
      );
      expect([...withoutKafka.statuses]).toEqual([200]);
      expect([...withKafka.statuses]).toEqual([200]);
      // Unchanged latency: within 25 % (+0.5 ms of timer noise) of the healthy gateway's.
      expect(withoutKafka.p50).toBeLessThanOrEqual(withKafka.p50 * 1.25 + 0.5);
      expect(withoutKafka.p95).toBeLessThanOrEqual(withKafka.p95 * 1.25 + 0.5);

      // Bounded buffer: every sample is either still buffered (≤ capacity) or counted as dropped.
      const total = REQUESTS + 200;
      const metrics = await down.app.inject({ method: 'GET', url: '/metrics' });
      const dropped = Number(/usage_samples_dropped_total\{reason="buffer_full"\} (\d+)/.exec(metrics.body)?.[1] ?? NaN);
      expect(down.publisher.bufferedCount).toBeLessThanOrEqual(CAPACITY);
      expect(dropped).toBe(total - down.publisher.bufferedCount);
      expect(dropped).toBeGreaterThanOrEqual(total - CAPACITY);

      // The healthy gateway dropped nothing and delivered its samples.
      await healthy.publisher.flush(20_000);
      const healthyMetrics = await healthy.app.inject({ method: 'GET', url: '/metrics' });
      expect(healthyMetrics.body).not.toMatch(/usage_samples_dropped_total\{reason="buffer_full"\} [1-9]/);
      expect(Number(/usage_samples_published_total (\d+)/.exec(healthyMetrics.body)?.[1])).toBe(total);
    } finally {
      await healthy.app.close();
      await down.app.close();
      await healthy.publisher.close();
      await down.publisher.close();
    }
  });
});
