import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { START, type EventStore } from '../../../shared/event-store/port.ts';
import { createKafkaClient } from '../../../shared/metrics-bus/kafkaClient.ts';
import { createKafkaPublisher } from '../../../shared/metrics-bus/kafkaPublisher.ts';
import { createKafkaSource } from '../../../shared/metrics-bus/kafkaSource.ts';
import type { UsageSample } from '../../../shared/metrics-bus/port.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { kpiBillingProjection } from '../../../projections/kpi/billingProjection.ts';
import { readKpiSummary } from '../../../projections/kpi/query.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { seededRandom as random } from '../../support/random.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * The KPI projector as a real child process on the real broker, SIGKILLed mid-stream ten
 * times while a real publisher keeps producing: the rollups must still hold every sample
 * exactly once (offsets commit with the rollups in one PostgreSQL transaction).
 */
const brokers = (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
const root = resolve(import.meta.dirname, '../../..');
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

let db: TestDatabase;
let store: EventStore;
let projector: ProjectorHandle;
const topic = `usage-samples-crash-${randomUUID()}`;
const group = `kpi-crash-${randomUUID()}`;
const admin = createKafkaClient(brokers, 'kpi-crash-test').admin();

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  projector = runProjection(db.pool, store, kpiBillingProjection, { pollIntervalMs: 50 });
  await waitForCheckpoint(db.pool, kpiBillingProjection.name, START, 20_000);
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 4, replicationFactor: 1 }], waitForLeaders: true });
});

afterAll(async () => {
  await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
  await admin.disconnect();
  await projector?.stop();
  await store?.close();
  await db?.drop();
});

function startWorker(): { child: ChildProcess; exited: Promise<void> } {
  // Plain `node` (no npm or loader wrapper): SIGKILL must hit the consumer itself, or an
  // orphaned consumer keeps running (and keeps vitest's pipes open, so the run never ends).
  const child = spawn(process.execPath, ['projections/kpi/consumerProcess.ts'], {
    cwd: root,
    env: {
      ...process.env,
      DATABASE_URL: db.url,
      KAFKA_BROKERS: brokers.join(','),
      KAFKA_METRICS_TOPIC: topic,
      KPI_CONSUMER_GROUP: group,
      KPI_SESSION_TIMEOUT_MS: '6000',
      LOG_LEVEL: 'error',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return { child, exited };
}

const appliedSoFar = async () =>
  db.pool.oneFirst(sql.type(z.object({ n: z.number() }))`
    select coalesce(sum(samples_applied), 0)::int8 as n from kpi_kafka_offsets where consumer_group = ${group} and topic = ${topic}
  `);

describe('KPI projector on Kafka', () => {
  describe('when the projector process is SIGKILLed mid-stream ten times', () => {
    it('still counts every sample exactly once: sample counts, dau, mau and p95 are exact', { timeout: 300_000 }, async () => {
      const rnd = random(20261122);
      const tenants = [randomUUID(), randomUUID(), randomUUID()];
      const users = tenants.map((_, t) => Array.from({ length: 40 + t * 30 }, () => randomUUID()));
      const now = Date.now();
      const published: UsageSample[] = [];
      const publisher = createKafkaPublisher({ brokers, topic, lingerMs: 10 });
      const sample = (): UsageSample => {
        const t = Math.floor(rnd() * tenants.length);
        const pool = users[t]!;
        // Two thirds of the users are recent; the rest only appear 2–29 days ago (mau, not dau).
        const u = Math.floor(rnd() * pool.length);
        const recent = u < (pool.length * 2) / 3;
        const age = recent ? rnd() * 23 * HOUR : 2 * DAY + rnd() * 27 * DAY;
        return {
          tenantId: tenants[t]!,
          userId: pool[u]!,
          route: '/v1/employees/:id',
          method: 'GET',
          status: rnd() < 0.02 ? 503 : 200,
          durationMs: Math.exp(Math.log(15) + (rnd() + rnd() + rnd() - 1.5) * 1.6),
          timestamp: Math.floor(now - age),
        };
      };

      // Keep producing in the background while the projector is being killed.
      let producing = true;
      const producer = (async () => {
        while (producing) {
          for (let i = 0; i < 200; i++) {
            const s = sample();
            published.push(s);
            publisher.publish(s);
          }
          // Paced so that the stream keeps flowing through every kill, not all sent up front.
          await new Promise((r) => setTimeout(r, 40));
        }
      })();

      for (let round = 0; round < 10; round++) {
        const worker = startWorker();
        const before = await appliedSoFar();
        await waitFor(async () => (await appliedSoFar()) > before, 60_000, `progress in round ${round}`);
        // A random kill point (seeded): where the kill lands in a batch is what the test varies.
        await new Promise((r) => setTimeout(r, Math.floor(rnd() * 250)));
        worker.child.kill('SIGKILL');
        await worker.exited;
      }
      producing = false;
      await producer;
      await publisher.flush(30_000);
      await publisher.close();

      const last = startWorker();
      try {
        await waitFor(async () => (await appliedSoFar()) >= published.length, 120_000, 'the last worker to catch up');
      } finally {
        last.child.kill('SIGTERM');
        await last.exited;
      }

      process.stdout.write(`[kpi crash] ${published.length} samples, 10 SIGKILLs, all applied exactly once\n`);
      expect(published.length).toBeGreaterThan(5_000);
      expect(await appliedSoFar()).toBe(published.length);
      const minuteTotal = await db.pool.oneFirst(sql.type(z.object({ n: z.number() }))`
        select coalesce(sum(samples), 0)::int8 as n from kpi_usage_minutes where tenant_id = any(${sql.array(tenants, 'uuid')})
      `);
      expect(minuteTotal).toBe(published.length);

      // asOf: the consumer has applied the whole topic (its stored offsets reach the topic's end
      // offsets), so every tenant's asOf is the instant the head was read — at or after its last sample.
      const head = createKafkaSource({ brokers, topic, groupId: group });
      const usage = { source: head, group };
      for (const tenantId of tenants) {
        const mine = published.filter((s) => s.tenantId === tenantId);
        const newest = mine.reduce((max, s) => Math.max(max, s.timestamp), 0);
        const kpi = await readKpiSummary({ pool: db.pool, eventStore: store, usage }, tenantId);
        const asOf = Date.parse(kpi.asOf);
        expect(asOf).toBeGreaterThanOrEqual(newest);
        const tenantSamples = await db.pool.oneFirst(sql.type(z.object({ samples: z.number() }))`
          select samples from kpi_tenant_usage where tenant_id = ${tenantId}
        `);
        expect(tenantSamples).toBe(mine.length);
        expect(kpi.dau).toBe(new Set(mine.filter((s) => s.timestamp > asOf - DAY).map((s) => s.userId)).size);
        expect(kpi.mau).toBe(new Set(mine.filter((s) => s.timestamp > asOf - 30 * DAY).map((s) => s.userId)).size);
        // p95 over the 1,440 minute buckets ending with asOf's minute, exact vs sketch.
        const firstMinute = asOf - (asOf % 60_000) - 1_439 * 60_000;
        const window = mine
          .filter((s) => s.timestamp >= firstMinute)
          .map((s) => s.durationMs)
          .sort((a, b) => a - b);
        const exact = window[Math.floor(0.95 * (window.length - 1))]!;
        expect(Math.abs(kpi.apiLatencyP95Ms - exact) / exact).toBeLessThanOrEqual(0.01);
      }
      await head.stop();
    });
  });
});
