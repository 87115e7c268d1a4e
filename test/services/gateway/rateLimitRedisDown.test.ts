import type { ChildProcess } from 'node:child_process';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { rateLimited } from '../../../services/gateway/rateLimit.ts';
import { createRateLimiter, type RateLimiter } from '../../../shared/rate-limit/limiter.ts';
import { createRedisRateLimitStore } from '../../../shared/rate-limit/redis.ts';
import { authHeaders, createTestApp, createTestAuth, provisionTenant } from '../../support/auth.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { freePort, startRedisServer, stopProcess } from '../../support/processes.ts';
import { createHttpClient, type HttpResponse } from '../../support/gateway/serverProcess.ts';
import { probeCapability } from '../../support/gateway/probeCapability.ts';
import { waitFor } from '../../support/waitFor.ts';

describe('when the Redis behind the rate limiter goes away and comes back', () => {
  let db: TestDatabase;
  let auth: AuthDeps;
  let app: FastifyInstance;
  let limiter: RateLimiter;
  let redis: ChildProcess | undefined;
  let port: number;
  let base: string;
  const registry = new Registry();
  const logLines: Array<{ level: number; msg: string }> = [];
  const http = createHttpClient();

  beforeAll(async () => {
    db = await createTestDatabase();
    auth = await createTestAuth(db.pool);
    port = await freePort();
    // Nothing listens on `port` yet: the limiter starts against a dead Redis.
    limiter = createRateLimiter({
      store: await createRedisRateLimitStore({ url: `redis://127.0.0.1:${port}`, connectTimeoutMs: 300 }),
      failOpen: true,
      registry,
      logger: pino({ level: 'info' }, { write: (line: string) => void logLines.push(JSON.parse(line) as { level: number; msg: string }) }),
    });
    app = await createTestApp(auth, rateLimited(limiter), probeCapability);
    base = await app.listen({ host: '127.0.0.1', port: 0 });
  });
  afterAll(async () => {
    http.close();
    if (redis) await stopProcess(redis);
    await app?.close();
    await limiter?.close();
    await db?.drop();
  });

  const warnings = () => logLines.filter((l) => l.level === pino.levels.values.warn);
  const recoveries = () => logLines.filter((l) => l.level === pino.levels.values.info && /answers again/.test(l.msg));

  it('keeps answering throughout, logs each outage once and counts it in /metrics', async () => {
    const starter = await authHeaders(auth, await provisionTenant(db.pool, { plan: 'starter' }), 'employee');
    // A steady background client whose generous override is never exhausted: every answer must be 200, promptly.
    const steadyHeaders = await authHeaders(
      auth,
      await provisionTenant(db.pool, { plan: 'enterprise', rateLimitOverride: { perMinute: 6_000_000, burst: 100_000 } }),
      'employee',
    );
    const background: Array<HttpResponse & { ms: number }> = [];
    let running = true;
    const loop = (async () => {
      while (running) {
        const started = Date.now();
        const response = await http.get(`${base}/v1/probe`, steadyHeaders);
        background.push({ ...response, ms: Date.now() - started });
        // Paced, not flat out: a steady client alongside the probes, not a load test.
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    let probeHeaders = starter;
    const probe = () => http.get(`${base}/v1/probe`, probeHeaders);
    const limited = (r: HttpResponse) => r.headers['ratelimit'] !== undefined;

    try {
      // 1. Dead from the start: served without limits (more than Starter's burst of 10).
      const whileDown = [];
      for (let i = 0; i < 15; i++) whileDown.push(await probe());
      expect(whileDown.map((r) => r.status)).toEqual(Array<number>(15).fill(200));
      expect(whileDown.some(limited)).toBe(false);
      expect(warnings()).toHaveLength(1);

      // 2. Redis appears: ioredis reconnects by itself and limits apply again.
      redis = await startRedisServer(port);
      await waitFor(async () => (await probe()).headers['ratelimit'] !== undefined, 15_000); // limits apply again
      expect(recoveries()).toHaveLength(1);
      await waitFor(async () => (await probe()).status === 429, 15_000); // the Starter bucket runs dry

      // 3. Redis is killed: fail open again, one more log line, not one per request. (A fresh
      // tenant: the dry one's refusal is still known locally for up to a second.)
      await stopProcess(redis);
      probeHeaders = await authHeaders(auth, await provisionTenant(db.pool, { plan: 'starter' }), 'employee');
      const afterKill = [];
      for (let i = 0; i < 15; i++) afterKill.push(await probe());
      expect(afterKill.map((r) => r.status)).toEqual(Array<number>(15).fill(200));
      expect(warnings()).toHaveLength(2);

      // 4. Redis hangs (SIGSTOP): the command timeout answers for it, no request hangs.
      redis = await startRedisServer(port);
      await waitFor(async () => (await probe()).headers['ratelimit'] !== undefined, 15_000); // limits apply again
      redis.kill('SIGSTOP');
      const hung = [];
      for (let i = 0; i < 3; i++) {
        const started = Date.now();
        const response = await probe();
        hung.push({ status: response.status, ms: Date.now() - started });
      }
      expect(hung.map((r) => r.status)).toEqual([200, 200, 200]);
      expect(Math.max(...hung.map((r) => r.ms))).toBeLessThan(1_500); // commandTimeout is 500 ms
      redis.kill('SIGCONT');
      await waitFor(async () => (await probe()).headers['ratelimit'] !== undefined, 15_000); // limits apply again
      expect(warnings()).toHaveLength(3);
      expect(recoveries()).toHaveLength(3);

      const metrics = await registry.metrics();
      expect(metrics).toMatch(/^rate_limit_store_incidents_total 3$/m);
      expect(metrics).toMatch(/^rate_limit_store_up 1$/m);
      expect(metrics).toMatch(/^rate_limit_store_unavailable_requests_total\{outcome="allowed"\} \d+$/m);
    } finally {
      running = false;
      await loop;
    }

    expect(background.length).toBeGreaterThan(20);
    expect(background.filter((r) => r.status !== 200)).toEqual([]);
    expect(Math.max(...background.map((r) => r.ms))).toBeLessThan(1_500);
  });
});
