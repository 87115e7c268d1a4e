import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { rateLimited } from '../../../services/gateway/rateLimit.ts';
import type { Plan, RateLimitOverride } from '../../../services/gateway/requestContext.ts';
import { updateTenantPlan } from '../../../services/tenants/tenants.ts';
import { createRateLimiter, type RateLimiter } from '../../../shared/rate-limit/limiter.ts';
import { createMemoryRateLimitStore } from '../../../shared/rate-limit/memory.ts';
import { createRedisRateLimitStore } from '../../../shared/rate-limit/redis.ts';
import { authHeaders, createTestApp, createTestAuth, provisionTenant } from '../../support/auth.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { freePort } from '../../support/processes.ts';
import { probeCapability } from '../../support/gateway/probeCapability.ts';

/** A pino logger that keeps its lines, to show an outage is logged once, not per request. */
const recordingLogger = () => {
  const lines: Array<{ level: number; msg: string }> = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as { level: number; msg: string }) });
  return Object.assign(logger, { lines });
};

describe('per-tenant rate limits through the authenticated scope', () => {
  let db: TestDatabase;
  let auth: AuthDeps;
  let app: FastifyInstance;
  let clock = 1_800_000_000_000;

  beforeAll(async () => {
    db = await createTestDatabase();
    auth = await createTestAuth(db.pool);
    const limiter = createRateLimiter({
      store: createMemoryRateLimitStore({ now: () => clock }),
      failOpen: true,
      registry: new Registry(),
      logger: recordingLogger(),
    });
    app = await createTestApp(auth, rateLimited(limiter), probeCapability);
  });
  afterAll(async () => {
    await app?.close();
    await db?.drop();
  });

  const callerOf = async (plan: Plan, rateLimitOverride: RateLimitOverride | null = null) => {
    const tenant = await provisionTenant(db.pool, { plan, rateLimitOverride });
    const headers = await authHeaders(auth, tenant, 'employee');
    return { tenant, get: (url = '/v1/probe') => app.inject({ method: 'GET', url, headers }) };
  };

  describe('when a Starter tenant sends a burst', () => {
    it('accepts exactly 10, with the limit in every response, then answers 429 problem+json with Retry-After', async () => {
      const caller = await callerOf('starter');
      const responses = [];
      for (let i = 0; i < 12; i++) responses.push(await caller.get());
      expect(responses.map((r) => r.statusCode)).toEqual([...Array<number>(10).fill(200), 429, 429]);

      expect(responses[0]?.headers).toMatchObject({
        'ratelimit-policy': '"burst";q=10;w=10',
        ratelimit: '"burst";r=9;t=1',
        'ratelimit-limit': '10',
        'ratelimit-remaining': '9',
        'ratelimit-reset': '1',
      });
      expect(responses[4]?.headers).toMatchObject({ ratelimit: '"burst";r=5;t=5', 'ratelimit-remaining': '5', 'ratelimit-reset': '5' });
      // the last token: nothing left, the next one in a second
      expect(responses[9]?.headers).toMatchObject({ ratelimit: '"burst";r=0;t=1', 'ratelimit-remaining': '0', 'ratelimit-reset': '1' });

      const refused = responses[10];
      expect(refused?.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(refused?.headers).toMatchObject({
        'retry-after': '1',
        'ratelimit-policy': '"burst";q=10;w=10',
        ratelimit: '"burst";r=0;t=1',
        'ratelimit-remaining': '0',
      });
      expect(refused?.json()).toMatchObject({
        type: '/problems/too-many-requests',
        title: 'Too Many Requests',
        status: 429,
        instance: '/v1/probe',
        'violated-policies': ['burst'],
      });
    });

    it('accepts one more request per second after that', async () => {
      const caller = await callerOf('starter');
      for (let i = 0; i < 10; i++) await caller.get();
      expect((await caller.get()).statusCode).toBe(429);
      clock += 999;
      expect((await caller.get()).statusCode).toBe(429);
      clock += 1;
      expect((await caller.get()).statusCode).toBe(200);
      expect((await caller.get()).statusCode).toBe(429);
      clock += 3_000;
      const three = [await caller.get(), await caller.get(), await caller.get(), await caller.get()];
      expect(three.map((r) => r.statusCode)).toEqual([200, 200, 200, 429]);
    });
  });

  describe('when a Pro tenant sends a burst', () => {
    it('accepts exactly 100', async () => {
      const caller = await callerOf('pro');
      const statuses = [];
      for (let i = 0; i < 105; i++) statuses.push((await caller.get()).statusCode);
      expect(statuses.filter((s) => s === 200)).toHaveLength(100);
      expect(statuses.slice(100)).toEqual([429, 429, 429, 429, 429]);
    });

    it('refills ten per second: Retry-After rounds the 100 ms wait up to 1 s', async () => {
      const caller = await callerOf('pro');
      for (let i = 0; i < 100; i++) await caller.get();
      const refused = await caller.get();
      expect(refused.headers).toMatchObject({ 'retry-after': '1', 'ratelimit-policy': '"burst";q=100;w=10' });
      clock += 100;
      expect((await caller.get()).statusCode).toBe(200);
    });
  });

  describe('when an Enterprise tenant has no override', () => {
    it('refuses nothing and sends no rate-limit fields', async () => {
      const caller = await callerOf('enterprise');
      const responses = await Promise.all(Array.from({ length: 300 }, () => caller.get()));
      expect(responses.every((r) => r.statusCode === 200)).toBe(true);
      expect(responses[0]?.headers).not.toHaveProperty('ratelimit');
      expect(responses[0]?.headers).not.toHaveProperty('ratelimit-limit');
    });
  });

  describe('when a tenant has a negotiated override', () => {
    it('limits an Enterprise tenant by the override', async () => {
      const caller = await callerOf('enterprise', { perMinute: 120, burst: 3 });
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push((await caller.get()).statusCode);
      expect(statuses).toEqual([200, 200, 200, 429]);
      expect((await caller.get()).headers).toMatchObject({ 'ratelimit-policy': '"burst";q=3;w=2', 'retry-after': '1' });
    });

    it('lets the override win over a Starter plan', async () => {
      const caller = await callerOf('starter', { perMinute: 6_000, burst: 40 });
      const statuses = [];
      for (let i = 0; i < 41; i++) statuses.push((await caller.get()).statusCode);
      expect(statuses.filter((s) => s === 200)).toHaveLength(40);
    });
  });

  describe('when the plan changes while the gateway runs', () => {
    it('applies the new limits to the next request once the tenant is re-read', async () => {
      const caller = await callerOf('starter');
      for (let i = 0; i < 10; i++) await caller.get();
      expect((await caller.get()).statusCode).toBe(429);

      await updateTenantPlan(db.pool, caller.tenant.slug, { plan: 'pro' });
      auth.tenants.invalidate(caller.tenant.slug); // other processes: within the tenant cache TTL
      // An upgrade grants no free tokens, but the bucket now refills at Pro speed (10/s).
      const atOnce = await caller.get();
      expect(atOnce.statusCode).toBe(429);
      expect(atOnce.headers['ratelimit-policy']).toBe('"burst";q=100;w=10');
      clock += 100;
      expect((await caller.get()).statusCode).toBe(200);

      await updateTenantPlan(db.pool, caller.tenant.slug, { plan: 'enterprise' });
      auth.tenants.invalidate(caller.tenant.slug);
      const unlimited = await Promise.all(Array.from({ length: 50 }, () => caller.get()));
      expect(unlimited.every((r) => r.statusCode === 200)).toBe(true);
    });
  });

  describe('when a limited request fails later in the scope', () => {
    it('still carries the rate-limit fields on the error (a 400 from validation)', async () => {
      const caller = await callerOf('starter');
      const invalid = await caller.get('/v1/probe?n=abc');
      expect(invalid.statusCode).toBe(400);
      expect(invalid.headers).toMatchObject({ 'ratelimit-remaining': '9', ratelimit: '"burst";r=9;t=1' });
    });

    it('limits the scope’s real routes too (GET /v1/roles)', async () => {
      const caller = await callerOf('starter');
      const roles = await caller.get('/v1/roles');
      expect(roles.statusCode).toBe(200);
      expect(roles.headers['ratelimit-remaining']).toBe('9');
    });
  });

  describe('when the request is not authenticated', () => {
    it('answers 401 without spending or reporting any bucket', async () => {
      const response = await app.inject({ method: 'GET', url: '/v1/probe' });
      expect(response.statusCode).toBe(401);
      expect(response.headers).not.toHaveProperty('ratelimit');
    });
  });
});

describe('when the rate-limit store is unreachable', () => {
  let db: TestDatabase;
  let auth: AuthDeps;
  let deadRedisUrl: string;

  beforeAll(async () => {
    db = await createTestDatabase();
    auth = await createTestAuth(db.pool);
    deadRedisUrl = `redis://127.0.0.1:${await freePort()}`;
  });
  afterAll(async () => {
    await db?.drop();
  });

  const gatewayWith = async (failOpen: boolean) => {
    const registry = new Registry();
    const logger = recordingLogger();
    const limiter: RateLimiter = createRateLimiter({
      store: await createRedisRateLimitStore({ url: deadRedisUrl, connectTimeoutMs: 200 }),
      failOpen,
      registry,
      logger,
    });
    const app = await createTestApp(auth, rateLimited(limiter), probeCapability);
    const tenant = await provisionTenant(db.pool, { plan: 'starter' });
    const headers = await authHeaders(auth, tenant, 'employee');
    return {
      registry,
      logger,
      get: () => app.inject({ method: 'GET', url: '/v1/probe', headers }),
      close: async () => {
        await app.close();
        await limiter.close();
      },
    };
  };

  it('fails open by default: serves every request, logs the incident once and counts it', async () => {
    const gateway = await gatewayWith(true);
    try {
      const started = Date.now();
      const responses = [];
      for (let i = 0; i < 25; i++) responses.push(await gateway.get());
      expect(Date.now() - started).toBeLessThan(2_000); // no request waits on Redis
      expect(responses.map((r) => r.statusCode)).toEqual(Array<number>(25).fill(200)); // more than Starter's burst
      expect(responses[0]?.headers).not.toHaveProperty('ratelimit');
      expect(gateway.logger.lines.filter((l) => l.level === pino.levels.values.warn)).toHaveLength(1);
      const metrics = await gateway.registry.metrics();
      expect(metrics).toMatch(/^rate_limit_store_incidents_total 1$/m);
      expect(metrics).toMatch(/^rate_limit_store_unavailable_requests_total\{outcome="allowed"\} 25$/m);
      expect(metrics).toMatch(/^rate_limit_store_up 0$/m);
    } finally {
      await gateway.close();
    }
  });

  it('fails closed when configured: 503 problem with Retry-After', async () => {
    const gateway = await gatewayWith(false);
    try {
      const response = await gateway.get();
      expect(response.statusCode).toBe(503);
      expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(response.headers['retry-after']).toBe('2');
      expect(response.json()).toMatchObject({ status: 503, type: '/problems/service-unavailable' });
    } finally {
      await gateway.close();
    }
  });
});
