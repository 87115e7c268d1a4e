import { randomUUID } from 'node:crypto';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../shared/config.ts';
import { createRuntime } from '../../../services/runtime.ts';
import { createGateway } from '../../../services/gateway/app.ts';
import { checkReadiness } from '../../../services/gateway/health.ts';
import { startProjectorRole } from '../../../services/roles/projector.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { freePort } from '../../support/processes.ts';

/**
 * Regression: a Kafka outage made every gateway unready (503 on /health/ready, so a load balancer
 * takes them all out), although usage samples never block a request (SPEC §1) and requests are
 * unaffected while Kafka is down (docs/analytics.md). Kafka is reported, degraded, not fatal —
 * as Redis is for a fail-open rate limiter.
 */
const logger = pino({ level: 'silent' });
let db: TestDatabase;


beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

type Ready = { status: string; checks: Record<string, { status: string }> };

describe('when KAFKA_BROKERS names an unreachable broker', () => {
  it('the gateway stays ready (200), reporting Kafka down and itself degraded', { timeout: 30_000 }, async () => {
    for (const broker of [`127.0.0.1:${await freePort()}`, `kafka-${randomUUID().slice(0, 8)}.invalid:9092`]) {
      const runtime = await createRuntime(loadConfig({ DATABASE_URL: db.url, KAFKA_BROKERS: broker, LOG_LEVEL: 'silent' }), logger);
      try {
        const app = await createGateway({
          config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
          readiness: runtime.readiness,
          registry: runtime.registry,
          v1: [],
        });
        try {
          const response = await app.inject({ method: 'GET', url: '/health/ready' });
          expect({ broker, status: response.statusCode }).toEqual({ broker, status: 200 });
          const body = response.json<Ready>();
          expect(body.status).toBe('degraded');
          expect(body.checks.kafka?.status).toBe('down');
          expect(body.checks.postgres?.status).toBe('up');
        } finally {
          await app.close();
        }
      } finally {
        await runtime.close();
      }
    }
  });

  it('still makes the gateway unready when a critical dependency is down, without naming Kafka', { timeout: 30_000 }, async () => {
    const runtime = await createRuntime(loadConfig({ DATABASE_URL: db.url, KAFKA_BROKERS: `127.0.0.1:${await freePort()}`, LOG_LEVEL: 'silent' }), logger);
    try {
      const app = await createGateway({
        config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
        readiness: [...runtime.readiness, { name: 'postgres-replica', check: () => Promise.reject(new Error('down')) }],
        registry: runtime.registry,
        v1: [],
      });
      try {
        const response = await app.inject({ method: 'GET', url: '/health/ready' });
        expect(response.statusCode).toBe(503);
        expect(response.json<{ detail: string }>().detail).toBe('Not ready: postgres-replica unavailable');
      } finally {
        await app.close();
      }
    } finally {
      await runtime.close();
    }
  });
});

describe('when the kpi projector runs as its own process and Kafka cannot be reached', () => {
  it('is unready (503): consuming Kafka is its whole job', { timeout: 60_000 }, async () => {
    const config = loadConfig({ DATABASE_URL: db.url, KAFKA_BROKERS: `127.0.0.1:${await freePort()}`, LOG_LEVEL: 'silent', HOST: '127.0.0.1', PORT: '0' });
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
