import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../shared/config.ts';
import { createRuntime, type Runtime } from '../../services/runtime.ts';
import { createTestDatabase, type TestDatabase } from '../support/database.ts';

const logger = pino({ level: 'silent' });

describe('runtime readiness', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db.drop();
  });

  const check = async (runtime: Runtime) =>
    Object.fromEntries(
      await Promise.all(
        runtime.readiness.map(
          async (r) =>
            [
              r.name,
              await r.check().then(
                () => 'up',
                () => 'down',
              ),
            ] as const,
        ),
      ),
    );

  describe('when every configured dependency answers', () => {
    it('checks each of them', async () => {
      const runtime = await createRuntime(
        loadConfig({ DATABASE_URL: db.url, REDIS_URL: process.env.REDIS_URL, LOG_LEVEL: 'silent' }),
        logger,
      );
      try {
        expect(await check(runtime)).toEqual({ postgres: 'up', projections: 'up', redis: 'up' });
      } finally {
        await runtime.close();
      }
    });
  });

  describe('when Redis is configured but unreachable', () => {
    it('reports it down at once instead of waiting', async () => {
      const runtime = await createRuntime(
        loadConfig({ DATABASE_URL: db.url, REDIS_URL: 'redis://127.0.0.1:1', LOG_LEVEL: 'silent' }),
        logger,
      );
      try {
        const started = Date.now();
        expect(await check(runtime)).toEqual({ postgres: 'up', projections: 'up', redis: 'down' });
        expect(Date.now() - started).toBeLessThan(2_500);
      } finally {
        await runtime.close();
      }
    });
  });
});
