/**
 * Rate-limit overhead: the same route with the per-tenant limiter ÷ without it, in one run.
 *
 *   node bench/scenarios/rateLimit.ts
 *
 * Uses REDIS_URL (default redis://127.0.0.1:6379) and, for the authenticated route, a fresh
 * database on DATABASE_URL's server (default postgres://postgres@127.0.0.1:5432/postgres),
 * dropped afterwards.
 *
 * A child process (this file with RATE_LIMIT_BENCH_ROLE=server, so the load generator and the
 * server do not share an event loop) runs two gateways that differ only by the limiter:
 *   baseline: GET /v1/roles behind `authenticated(auth, rolesRoutes)`, and a trivial GET /v1/bench/probe
 *   limited:  the same behind `authenticated(auth, rateLimited(limiter), rolesRoutes)` / the rate-limit plugin
 * The limiter is the production one (Redis store, one EVALSHA per request). The tenant's negotiated
 * override is a limit no run reaches, so every request pays the full check and none is refused
 * (a non-2xx response fails the run). autocannon measures baseline and limited in pairs
 * (ABBA order, short rounds) and the result is the median over the pairs, so drift and load
 * spikes on a shared machine hit both sides alike. Run directly, it also measures the
 * in-memory store (the embedded default).
 */
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { createBenchDatabase } from '../support/database.ts';
import { Registry } from 'prom-client';
import { createKeyRing, generatePrivateJwk } from '../../services/auth/keys.ts';
import { authenticated, createAuthDeps } from '../../services/auth/plugin.ts';
import { rolesRoutes } from '../../services/auth/routes.ts';
import { createGateway, type V1Capability } from '../../services/gateway/app.ts';
import { rateLimited, rateLimitPlugin } from '../../services/gateway/rateLimit.ts';
import { provisionTenant } from '../../services/tenants/provision.ts';
import { createDatabasePool } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/logger.ts';
import { createRateLimiter } from '../../shared/rate-limit/limiter.ts';
import { createMemoryRateLimitStore } from '../../shared/rate-limit/memory.ts';
import { MAX_OVERRIDE } from '../../shared/rate-limit/policy.ts';
import { createRedisRateLimitStore } from '../../shared/rate-limit/redis.ts';
import { median } from '../support/measure.ts';

export type ScenarioResult = { name: string; ours: number; baseline: number; ratio: number };

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const ADMIN_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const say = (message: string) => process.stderr.write(`[bench rate-limit] ${message}\n`);

type ServerInfo = { baseline: string; limited: string; headers: Record<string, string>; unlimitedHeaders: Record<string, string> };

async function serve(): Promise<void> {
  const database = await createBenchDatabase('bench_rl', ADMIN_URL);
  const pool = await createDatabasePool(database.url, { applicationName: 'bench-rate-limit' });

  const logger = createLogger({ LOG_LEVEL: 'warn' }, 'bench-rate-limit');
  const auth = await createAuthDeps({
    pool,
    config: { JWT_ISSUER: 'bench', JWT_AUDIENCE: 'bench', JWT_PRIVATE_JWKS: undefined, DATA_DIR: '.tmp/unused' },
    keys: await createKeyRing([await generatePrivateJwk()]),
  });
  const limitless = { perMinute: MAX_OVERRIDE, burst: MAX_OVERRIDE };
  const { tenant } = await provisionTenant(pool, { slug: `bench-${randomBytes(4).toString('hex')}`, plan: 'starter', rateLimitOverride: limitless });
  const { accessToken } = await auth.tokens.issue({ userId: randomUUID(), tenant: tenant.slug, roles: ['employee'] });
  // The second method's baseline: an Enterprise tenant without an override is never limited, so
  // its requests skip the limiter (and Redis) on the very same gateway.
  const { tenant: unlimitedTenant } = await provisionTenant(pool, { slug: `bench-${randomBytes(4).toString('hex')}`, plan: 'enterprise' });
  const { accessToken: unlimitedToken } = await auth.tokens.issue({ userId: randomUUID(), tenant: unlimitedTenant.slug, roles: ['employee'] });

  const limiter = createRateLimiter({
    store:
      process.env.RATE_LIMIT_BENCH_STORE === 'memory'
        ? createMemoryRateLimitStore()
        : await createRedisRateLimitStore({ url: REDIS_URL, prefix: `bench:rl:${randomUUID()}:` }),
    failOpen: false, // a Redis problem must show up as errors, not as a fast unlimited run
    registry: new Registry(),
    logger,
  });
  const probe = (limit: boolean): V1Capability => async (v1) => {
    await v1.register(async (scope) => {
      if (limit) await scope.register(rateLimitPlugin, { limiter, target: () => ({ key: `tenant:${tenant.id}`, policy: limitless }) });
      scope.get('/bench/probe', async () => ({ ok: true }));
    });
  };
  const gateway = (limit: boolean) =>
    createGateway({
      config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'warn', NODE_ENV: 'production' },
      logger,
      readiness: [],
      registry: new Registry(),
      v1: [probe(limit), authenticated(auth, ...(limit ? [rateLimited(limiter)] : []), rolesRoutes(auth))],
    });
  const apps = [await gateway(false), await gateway(true)] as const;
  const [baseline, limited] = await Promise.all(apps.map((app) => app.listen({ host: '127.0.0.1', port: 0 })));
  const info: ServerInfo = {
    baseline: baseline ?? '',
    limited: limited ?? '',
    headers: { authorization: `Bearer ${accessToken}`, 'x-tenant': tenant.slug },
    unlimitedHeaders: { authorization: `Bearer ${unlimitedToken}`, 'x-tenant': unlimitedTenant.slug },
  };
  process.stdout.write(`${JSON.stringify(info)}\n`);

  process.on('SIGTERM', () => {
    void (async () => {
      for (const app of apps) await app.close();
      await limiter.close();
      await pool.end();
      await database.drop();
      process.exit(0);
    })();
  });
}


const load = (url: string, headers: Record<string, string>, durationSeconds: number, connections: number) =>
  new Promise<autocannon.Result>((resolve, reject) => {
    autocannon({ url, headers, duration: durationSeconds, connections }, (error, result) => (error ? reject(error) : resolve(result)));
  });

export type RateLimitBenchOptions = {
  rounds?: number;
  durationSeconds?: number;
  connections?: number;
  /** `redis` (default; what several gateways share) or `memory` (the embedded default). */
  store?: 'redis' | 'memory';
};

/** Both routes, one server: the authenticated DB-backed route and the trivial one. */
export async function runRateLimitBench(options: RateLimitBenchOptions = {}): Promise<ScenarioResult[]> {
  const rounds = options.rounds ?? 10;
  const durationSeconds = options.durationSeconds ?? 2;
  const connections = options.connections ?? 32;
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url)], {
    env: { ...process.env, RATE_LIMIT_BENCH_ROLE: 'server', RATE_LIMIT_BENCH_STORE: options.store ?? 'redis' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    const server = await new Promise<ServerInfo>((resolve, reject) => {
      let out = '';
      child.stdout?.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        const line = out.split('\n').find((l) => l.startsWith('{"baseline"'));
        if (line) resolve(JSON.parse(line) as ServerInfo);
      });
      child.once('exit', (code) => reject(new Error(`bench server exited with ${code}`)));
    });
    const store = options.store ?? 'redis';
    type Side = { readonly url: string; readonly headers: Record<string, string> };
    // Two methods, because they disagree: (1) two gateways that differ only by the limiter, one
    // tenant; (2) one gateway with the limiter, a tenant with a limit (every request checked)
    // vs an Enterprise tenant without one (never checked), same route.
    const comparisons: Array<{ name: string; limited: Side; baseline: Side }> = [
      {
        name: `rate limit: GET /v1/roles (authenticated, PostgreSQL) with the ${store} limiter ÷ without (two gateways), req/s`,
        limited: { url: server.limited + '/v1/roles', headers: server.headers },
        baseline: { url: server.baseline + '/v1/roles', headers: server.headers },
      },
      {
        name: `rate limit: GET /v1/roles, one gateway, limited tenant ÷ unlimited Enterprise tenant (${store} store), req/s`,
        limited: { url: server.limited + '/v1/roles', headers: server.headers },
        baseline: { url: server.limited + '/v1/roles', headers: server.unlimitedHeaders },
      },
      {
        name: `rate limit: trivial route with the ${store} limiter ÷ without, req/s (worst case)`,
        limited: { url: server.limited + '/v1/bench/probe', headers: server.headers },
        baseline: { url: server.baseline + '/v1/bench/probe', headers: server.headers },
      },
    ];
    const results: ScenarioResult[] = [];
    for (const comparison of comparisons) {
      // Warm-up: JIT, keep-alive sockets, caches, the Lua script in Redis's script cache.
      for (const side of [comparison.baseline, comparison.limited]) await load(side.url, side.headers, 2, connections);
      const pairs: Array<{ baseline: number; limited: number }> = [];
      for (let round = 0; round < rounds; round++) {
        // ABBA order: a load that rises or falls during the pair hits both sides alike.
        const order = round % 2 === 0 ? (['baseline', 'limited'] as const) : (['limited', 'baseline'] as const);
        const pair = { baseline: 0, limited: 0 };
        for (const side of order) {
          const { url, headers } = comparison[side];
          const result = await load(url, headers, durationSeconds, connections);
          if (result.non2xx > 0 || result.errors > 0) {
            throw new Error(`${side} ${url}: ${result.non2xx} non-2xx responses and ${result.errors} errors`);
          }
          pair[side] = result.requests.total / result.duration;
        }
        pairs.push(pair);
        say(`${comparison.name} pair ${round + 1}: ${Math.round(pair.baseline)} vs ${Math.round(pair.limited)} req/s (${(pair.limited / pair.baseline).toFixed(3)})`);
      }
      // Medians: one pair disturbed by a neighbour's load spike does not move the result.
      results.push({
        name: comparison.name,
        ours: Math.round(median(pairs.map((p) => p.limited))),
        baseline: Math.round(median(pairs.map((p) => p.baseline))),
        ratio: Number(median(pairs.map((p) => p.limited / p.baseline)).toFixed(3)),
      });
    }
    return results;
  } finally {
    child.kill('SIGTERM');
  }
}

/** The headline scenario for bench/run.ts: an authenticated route with the limiter ÷ without. */
export async function rateLimitScenario(options: RateLimitBenchOptions = {}): Promise<ScenarioResult> {
  const [authenticatedRoute] = await runRateLimitBench(options);
  if (!authenticatedRoute) throw new Error('rate-limit bench produced no result');
  return authenticatedRoute;
}

export default rateLimitScenario;

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.env.RATE_LIMIT_BENCH_ROLE === 'server') await serve();
  else {
    for (const store of ['redis', 'memory'] as const) {
      for (const result of await runRateLimitBench({ store })) process.stdout.write(`${JSON.stringify(result)}\n`);
    }
  }
}
