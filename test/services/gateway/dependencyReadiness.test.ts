import { randomUUID } from 'node:crypto';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../shared/config.ts';
import { createRuntime } from '../../../services/runtime.ts';
import { createGateway } from '../../../services/gateway/app.ts';
import { checkReadiness, type ReadinessCheck } from '../../../services/gateway/health.ts';
import { startProjectorRole } from '../../../services/processes/projector.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { freePort } from '../../support/processes.ts';

/**
 * Readiness when a dependency other than PostgreSQL is down (real runtime, unreachable addresses):
 * - Kafka: a Kafka outage made every gateway unready (503 on /health/ready, so a load balancer
 *   takes them all out), although usage samples never block a request and requests are
 *   unaffected while Kafka is down (docs/analytics.md). Reported, degraded, not fatal — except for
 *   the kpi projector, whose whole job is consuming it.
 * - Redis, as docs/rate-limits.md says: reported whenever REDIS_URL is set; not critical with
 *   RATE_LIMIT_FAIL_OPEN=true (200, degraded), critical with false (503).
 */
const logger = pino({ level: 'silent' });
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

type Ready = { status: string; detail?: string; checks: Record<string, { status: string }> };

/** `/health/ready` of a gateway on a runtime configured with `env` (plus `extra` checks). */
async function readyWith(env: Record<string, string>, extra: readonly ReadinessCheck[] = []) {
  const runtime = await createRuntime(loadConfig({ DATABASE_URL: db.url, LOG_LEVEL: 'silent', ...env }), logger);
  try {
    const app = await createGateway({
      config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
      readiness: [...runtime.readiness, ...extra],
      registry: runtime.registry,
      v1: [],
    });
    try {
      const response = await app.inject({ method: 'GET', url: '/health/ready' });
      return { status: response.statusCode, body: response.json<Ready>() };
    } finally {
      await app.close();
    }
  } finally {
    await runtime.close();
  }
}

describe('when KAFKA_BROKERS names an unreachable broker', () => {
  it('the gateway stays ready (200), reporting Kafka down and itself degraded', { timeout: 30_000 }, async () => {
    for (const broker of [`127.0.0.1:${await freePort()}`, `kafka-${randomUUID().slice(0, 8)}.invalid:9092`]) {
      const { status, body } = await readyWith({ KAFKA_BROKERS: broker });
      expect({ broker, status }).toEqual({ broker, status: 200 });
      expect(body.status).toBe('degraded');
      expect(body.checks.kafka?.status).toBe('down');
      expect(body.checks.postgres?.status).toBe('up');
    }
  });

  it('still makes the gateway unready when a critical dependency is down, without naming Kafka', { timeout: 30_000 }, async () => {
    const { status, body } = await readyWith({ KAFKA_BROKERS: `127.0.0.1:${await freePort()}` }, [
      { name: 'postgres-replica', check: () => Promise.reject(new Error('down')) },
    ]);
    expect(status).toBe(503);
    expect(body.detail).toBe('Not ready: postgres-replica unavailable');
  });
});

describe('when the kpi projector runs as its own process and Kafka cannot be reached', () => {
  it('is unready (503): consuming Kafka is its whole job', { timeout: 60_000 }, async () => {
    const config = loadConfig({
      DATABASE_URL: db.url,
      KAFKA_BROKERS: `127.0.0.1:${await freePort()}`,
      LOG_LEVEL: 'silent',
      HOST: '127.0.0.1',
      PORT: '0',
    });
    const runtime = await createRuntime(config, logger);
    try {
      const role = await startProjectorRole({ config, logger, runtime }, 'kpi');
      try {
        const kafka = runtime.readiness.find((check) => check.name === 'kafka');
        expect(kafka?.critical).toBe(true);
        const { status, down } = await checkReadiness(runtime.readiness);
        expect({ status, down }).toEqual({ status: 'down', down: ['kafka'] });
      } finally {
        await role.close();
      }
    } finally {
      await runtime.close();
    }
  });
});

describe('when the rate limiter’s Redis is unreachable', () => {
  const redisDown = (failOpen: 'true' | 'false') => readyWith({ REDIS_URL: 'redis://127.0.0.1:1', RATE_LIMIT_FAIL_OPEN: failOpen });

  it('fail-open: the gateway stays ready, degraded', async () => {
    const { status, body } = await redisDown('true');
    expect(status).toBe(200);
    expect(body).toMatchObject({ status: 'degraded', checks: { redis: { status: 'down' } } });
  });

  it('fail-closed: the gateway is not ready', async () => {
    const { status, body } = await redisDown('false');
    expect(status).toBe(503);
    expect(body).toMatchObject({ checks: { redis: { status: 'down' } } });
  });
});
