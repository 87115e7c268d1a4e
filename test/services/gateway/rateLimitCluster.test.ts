import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createKeyRing, generatePrivateJwk } from '../../../services/auth/keys.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import type { Plan } from '../../../services/gateway/requestContext.ts';
import { authHeaders, createTestAuth, provisionTenant, TEST_AUDIENCE, TEST_ISSUER } from '../../support/auth.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { createHttpClient, startServerProcess, type HttpResponse, type ServerProcess } from '../../support/gateway/serverProcess.ts';

/**
 * Two gateway processes share one Redis: a tenant's bucket is one bucket, whichever gateway a
 * request lands on. Requests alternate between the two processes.
 */
describe('when two gateway processes share one Redis', () => {
  let db: TestDatabase;
  let auth: AuthDeps;
  let servers: ServerProcess[] = [];
  const http = createHttpClient();

  beforeAll(async () => {
    db = await createTestDatabase();
    const jwk = await generatePrivateJwk();
    auth = await createTestAuth(db.pool, { keys: await createKeyRing([jwk]) });
    const env = {
      DATABASE_URL: db.url,
      REDIS_URL: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
      JWT_PRIVATE_JWKS: JSON.stringify([jwk]),
      JWT_ISSUER: TEST_ISSUER,
      JWT_AUDIENCE: TEST_AUDIENCE,
    };
    servers = await Promise.all([startServerProcess(env), startServerProcess(env)]);
    // Open the keep-alive connections and warm both processes up (JIT, Redis script cache, the
    // 429 path) on throwaway tenants, so the measured bursts are not paced by start-up costs.
    await Promise.all(Array.from({ length: 200 }, (_, i) => http.get(`${servers[i % 2]?.address}/health/live`)));
    for (const plan of ['enterprise', 'starter', 'pro', 'enterprise'] as const) await burst(await tenantOf(plan));
  }, 120_000);
  afterAll(async () => {
    http.close();
    await Promise.all(servers.map((s) => s.stop()));
    await db?.drop();
  });

  const tenantOf = async (plan: Plan) => {
    const tenant = await provisionTenant(db.pool, { plan });
    const headers = await authHeaders(auth, tenant, 'employee');
    return (i: number) => http.get(`${servers[i % 2]?.address}/v1/probe`, headers);
  };

  /**
   * A tenant whose token and tenant row both gateways have already cached, with a full bucket:
   * one request to each gateway, then the refill time those responses announce.
   */
  const warmTenantOf = async (plan: Plan) => {
    const get = await tenantOf(plan);
    const [a, b] = await Promise.all([get(0), get(1)]);
    const refillS = Math.max(Number(a.headers['ratelimit-reset'] ?? 0), Number(b.headers['ratelimit-reset'] ?? 0));
    // The bucket refills over real time (Redis TIME): nothing to wait on but the clock.
    await new Promise((resolve) => setTimeout(resolve, refillS * 1000));
    return get;
  };

  /** 200 requests at once, alternating between the two gateways. */
  const burst = async (get: (i: number) => Promise<HttpResponse>) => {
    const started = Date.now();
    const responses = await Promise.all(Array.from({ length: 200 }, (_, i) => get(i)));
    return { responses, ms: Date.now() - started, accepted: responses.filter((r) => r.status === 200) };
  };

  /**
   * What a burst may admit: exactly the bucket, plus the tokens that flowed back while it was
   * being served (0 when it is served within one refill interval). A read-modify-write race
   * between gateways would admit far more; a bucket per gateway would admit double.
   */
  const expectExactlyTheBucket = (result: Awaited<ReturnType<typeof burst>>, burstSize: number, refillMs: number) => {
    const remaining = result.accepted.map((r) => Number(r.headers['ratelimit-remaining']));
    // every token of the one shared bucket was handed out once, counting down across both gateways
    expect(new Set(remaining)).toEqual(new Set(Array.from({ length: burstSize }, (_, i) => i)));
    const refilled = Math.floor(result.ms / refillMs);
    expect(result.accepted.length, `burst served in ${result.ms} ms`).toBeGreaterThanOrEqual(burstSize);
    expect(result.accepted.length, `burst served in ${result.ms} ms`).toBeLessThanOrEqual(burstSize + refilled);
    process.stdout.write(`[rate-limit cluster] ${result.accepted.length} of 200 accepted in ${result.ms} ms\n`);
  };

  it('a Starter tenant gets exactly 10 of 200 concurrent requests, then about one per second', async () => {
    const get = await warmTenantOf('starter');
    const result = await burst(get);
    expectExactlyTheBucket(result, 10, 1_000);
    expect(result.responses.filter((r) => r.status === 429)).toHaveLength(190);

    // Then a steady client, ten requests a second over both gateways, gets about one a second.
    const steady: HttpResponse[] = [];
    const steadyFrom = Date.now();
    for (let i = 0; i < 40; i++) {
      steady.push(await get(i));
      // The client's pace is the input under test.
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const seconds = (Date.now() - steadyFrom) / 1000;
    const times = steady.filter((r) => r.status === 200).map((r) => r.at);
    expect(times.length).toBeGreaterThanOrEqual(Math.floor(seconds) - 1);
    expect(times.length).toBeLessThanOrEqual(Math.ceil(seconds) + 1);
    // a token a second: accepted responses are about a second apart (less only by response jitter)
    for (let i = 1; i < times.length; i++) expect((times[i] ?? 0) - (times[i - 1] ?? 0)).toBeGreaterThan(600);
  });

  it('a Pro tenant gets exactly its 100 of 200 concurrent requests (plus tokens refilled meanwhile)', async () => {
    // Pro refills a token every 100 ms, less than 200 requests take on a loaded machine: the
    // assertion allows exactly those refilled tokens, and no more.
    expectExactlyTheBucket(await burst(await warmTenantOf('pro')), 100, 100);
  });

  it('an Enterprise tenant has none of 200 concurrent requests refused', async () => {
    const { responses } = await burst(await warmTenantOf('enterprise'));
    expect(responses.map((r) => r.status)).toEqual(Array<number>(200).fill(200));
  });
});
