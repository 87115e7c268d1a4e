import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../shared/config.ts';
import { createRuntime } from '../../../services/runtime.ts';
import { createGateway } from '../../../services/gateway/app.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';

/**
 * What docs/rate-limits.md says of readiness and the limiter's Redis: reported whenever REDIS_URL
 * is set; not critical with RATE_LIMIT_FAIL_OPEN=true (200, degraded), critical with false (503).
 */
const logger = pino({ level: 'silent' });
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

async function readyWith(failOpen: 'true' | 'false') {
  const runtime = await createRuntime(loadConfig({ DATABASE_URL: db.url, REDIS_URL: 'redis://127.0.0.1:1', RATE_LIMIT_FAIL_OPEN: failOpen, LOG_LEVEL: 'silent' }), logger);
  try {
    const app = await createGateway({ config: { BODY_LIMIT_BYTES: 1024, LOG_LEVEL: 'silent', NODE_ENV: 'test' }, readiness: runtime.readiness, registry: runtime.registry, v1: [] });
    try {
      const response = await app.inject({ url: '/health/ready' });
      return { status: response.statusCode, body: response.json<{ status?: string; checks: Record<string, { status: string }> }>() };
    } finally {
      await app.close();
    }
  } finally {
    await runtime.close();
  }
}

describe('when the rate limiter’s Redis is unreachable', () => {
  it('fail-open: the gateway stays ready, degraded', async () => {
    const { status, body } = await readyWith('true');
    expect(status).toBe(200);
    expect(body).toMatchObject({ status: 'degraded', checks: { redis: { status: 'down' } } });
  });

  it('fail-closed: the gateway is not ready', async () => {
    const { status, body } = await readyWith('false');
    expect(status).toBe(503);
    expect(body).toMatchObject({ checks: { redis: { status: 'down' } } });
  });
});
