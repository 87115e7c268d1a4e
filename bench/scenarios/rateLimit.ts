/**
 * Rate-limit overhead: the same route with the per-tenant limiter ÷ without it, in one run.
 *
 *   node bench/scenarios/rateLimit.ts
 *
 * Uses REDIS_URL (default redis://127.0.0.1:6379) and a fresh database on DATABASE_URL's server
 * (default postgres://postgres@127.0.0.1:5432/postgres), dropped afterwards.
 *
 * Each gateway is its own child process (this file with RATE_LIMIT_BENCH_ROLE=server), so the
 * load generator and the servers share no event loop, heap or JIT state:
 *   baseline: `authenticated(auth, probe, rolesRoutes)` plus a trivial unauthenticated route
 *   limited:  `authenticated(auth, rateLimited(limiter), probe, rolesRoutes)`, and the trivial
 *             route behind the rate-limit plugin alone (one fixed bucket, no auth)
 * The limiter is the production one (Redis store). The limited tenant's negotiated override is a
 * limit no run reaches, so every request pays the full check and none is refused (a non-2xx
 * response fails the run).
 *
 * Two methods, because they can disagree (docs/benchmarks.md, rate-limit):
 *   two gateways:  limited process ÷ baseline process, same tenant, same route;
 *   one gateway:   the limited process, a tenant with a limit ÷ an Enterprise tenant without
 *                  one (its requests skip the store), same route.
 * And a control: the limited process ÷ a third process without a limiter whose requests each
 * wait one event-loop turn (setImmediate), as the batched limiter makes them wait. On this
 * 2-core box, with autocannon's closed loop of 32 connections, that wait alone changes the
 * gateway's CPU per request a lot (requests and responses then move in groups, with fewer
 * wake-ups per request), so the first two methods can show a limiter that "costs" less than
 * nothing; the control isolates the limiter's own work.
 * Per route, autocannon measures every side in each round (short rounds, the order reversed
 * every round), so both methods come from the same moments of the run; req/s figures are the
 * median over the rounds, so drift and load spikes on a shared machine hit all sides alike.
 * Each round also reads the CPU time the serving process and redis-server spent (utime+stime
 * from /proc/<pid>/stat, `INFO cpu`) ÷ the requests served: CPU per request moves far less
 * than req/s when other work shares the cores. redis-server's figure counts everything that
 * Redis did meanwhile, other clients included. Run directly, it also measures the in-memory
 * store (the embedded default).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { Redis } from 'ioredis';
import { Registry } from 'prom-client';
import { z } from 'zod';
import { createKeyRing, parsePrivateJwks } from '../../services/auth/keys.ts';
import { authenticated, createAuthDeps } from '../../services/auth/plugin.ts';
import { rolesRoutes } from '../../services/auth/routes.ts';
import { createGateway, type V1Capability } from '../../services/gateway/app.ts';
import { rateLimited, rateLimitPlugin } from '../../services/gateway/rateLimit.ts';
import { provisionTenant } from '../../services/tenants/provision.ts';
import { loadConfig } from '../../shared/config.ts';
import { createDatabasePool } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/logger.ts';
import { createRateLimiter } from '../../shared/rate-limit/limiter.ts';
import { createMemoryRateLimitStore } from '../../shared/rate-limit/memory.ts';
import { MAX_OVERRIDE } from '../../shared/rate-limit/policy.ts';
import { createRedisRateLimitStore } from '../../shared/rate-limit/redis.ts';
import { createBenchDatabase } from '../support/database.ts';
import { median } from '../support/measure.ts';
import { createBenchAuth, stopChild } from '../support/services.ts';

export type ScenarioResult = {
  name: string;
  ours: number;
  baseline: number;
  ratio: number;
  /** Median CPU µs per request: the serving process, and redis-server, for each side. */
  cpuUsPerRequest: { ours: number; baseline: number; redisOurs: number; redisBaseline: number };
};

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const ADMIN_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const say = (message: string) => process.stderr.write(`[bench rate-limit] ${message}\n`);

const LIMITLESS = { perMinute: MAX_OVERRIDE, burst: MAX_OVERRIDE };

const serverEnv = z.object({
  RATE_LIMIT_BENCH_DATABASE_URL: z.string(),
  RATE_LIMIT_BENCH_JWKS: z.string(),
  /** `deferred`: no limiter, but every request waits one event-loop turn (setImmediate), as a batched limiter makes it. */
  RATE_LIMIT_BENCH_LIMITED: z.enum(['yes', 'no', 'deferred']),
  RATE_LIMIT_BENCH_STORE: z.enum(['redis', 'memory']),
  /** The bucket the unauthenticated trivial route draws from. */
  RATE_LIMIT_BENCH_KEY: z.string(),
});

/** One gateway process: prints `{"address": …}` once it listens, stops on SIGTERM. */
async function serve(): Promise<void> {
  const env = serverEnv.parse(process.env);
  const limit = env.RATE_LIMIT_BENCH_LIMITED === 'yes';
  const deferred = env.RATE_LIMIT_BENCH_LIMITED === 'deferred';
  const waitOneTurn = () => new Promise<void>((resolve) => setImmediate(resolve));
  const pool = await createDatabasePool(env.RATE_LIMIT_BENCH_DATABASE_URL, { applicationName: 'bench-rate-limit' });
  const logger = createLogger({ LOG_LEVEL: 'warn' }, 'bench-rate-limit');
  const auth = await createAuthDeps({
    pool,
    // Issuer and audience as createBenchAuth signs them (the configuration defaults).
    config: { ...loadConfig({}), JWT_PRIVATE_JWKS: undefined },
    keys: await createKeyRing(parsePrivateJwks(env.RATE_LIMIT_BENCH_JWKS)),
  });
  const limiter = createRateLimiter({
    store:
      env.RATE_LIMIT_BENCH_STORE === 'memory'
        ? createMemoryRateLimitStore()
        : await createRedisRateLimitStore({ url: REDIS_URL, prefix: `bench:rl:${randomUUID()}:` }),
    failOpen: false, // a Redis problem must show up as errors, not as a fast unlimited run
    registry: new Registry(),
    logger,
  });
  const trivial: V1Capability = async (v1) => {
    await v1.register(async (scope) => {
      if (limit) await scope.register(rateLimitPlugin, { limiter, target: () => ({ key: env.RATE_LIMIT_BENCH_KEY, policy: LIMITLESS }) });
      if (deferred) scope.addHook('onRequest', waitOneTurn);
      scope.get('/bench/probe', async () => ({ ok: true }));
    });
  };
  const deferOneTurn: V1Capability = async (scope) => {
    scope.addHook('onRequest', waitOneTurn);
  };
  const authenticatedProbe: V1Capability = async (scope) => {
    scope.get('/bench/auth-probe', { config: { permission: 'roles:read' } }, async () => ({ ok: true }));
  };
  const app = await createGateway({
    config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'warn', NODE_ENV: 'production' },
    logger,
    readiness: [],
    registry: new Registry(),
    v1: [
      trivial,
      authenticated(
        auth,
        ...(limit ? [rateLimited(limiter)] : []),
        ...(deferred ? [deferOneTurn] : []),
        authenticatedProbe,
        rolesRoutes(auth),
      ),
    ],
  });
  const address = await app.listen({ host: '127.0.0.1', port: 0 });
  process.stdout.write(`${JSON.stringify({ address })}\n`);
  process.on('SIGTERM', () => {
    void (async () => {
      await app.close();
      await limiter.close();
      await auth.close();
      await pool.end();
      process.exit(0);
    })();
  });
}

type Gateway = { readonly address: string; readonly child: ChildProcess };

async function startGateway(env: Record<string, string>): Promise<Gateway> {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url)], {
    env: { ...process.env, ...env, RATE_LIMIT_BENCH_ROLE: 'server' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const address = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const line = out.split('\n').find((l) => l.startsWith('{"address"'));
      if (line) resolve(z.object({ address: z.string() }).parse(JSON.parse(line)).address);
    });
    child.once('exit', (code) => reject(new Error(`bench gateway exited with ${code}`)));
  });
  return { address, child };
}

/** utime + stime of a process, in µs (/proc/<pid>/stat fields 14 and 15, in clock ticks of 10 ms). */
function processCpuUs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

/** redis-server's own CPU time so far, in µs (`INFO cpu`: used_cpu_user + used_cpu_sys, seconds). */
async function redisCpuUs(redis: Redis): Promise<number> {
  const info = await redis.info('cpu');
  const seconds = (name: string) => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)?.[1] ?? Number.NaN);
  return (seconds('used_cpu_user') + seconds('used_cpu_sys')) * 1e6;
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

/** Three routes × the two methods above, each gateway its own process. */
export async function runRateLimitBench(options: RateLimitBenchOptions = {}): Promise<ScenarioResult[]> {
  const rounds = options.rounds ?? 10;
  const durationSeconds = options.durationSeconds ?? 2;
  const connections = options.connections ?? 32;
  const store = options.store ?? 'redis';

  const database = await createBenchDatabase('bench_rl', ADMIN_URL);
  const gateways: Gateway[] = [];
  const redis = new Redis(REDIS_URL, { lazyConnect: true });
  try {
    const benchAuth = await createBenchAuth();
    const pool = await createDatabasePool(database.url, { applicationName: 'bench-rate-limit' });
    const tenants = await (async () => {
      try {
        const slug = () => `bench-${randomBytes(4).toString('hex')}`;
        const { tenant } = await provisionTenant(pool, { slug: slug(), plan: 'starter', rateLimitOverride: LIMITLESS });
        // The one-gateway method's baseline: an Enterprise tenant without an override is never
        // limited, so its requests skip the limiter (and Redis) on the very same gateway.
        const { tenant: unlimited } = await provisionTenant(pool, { slug: slug(), plan: 'enterprise' });
        return { limited: tenant, unlimited };
      } finally {
        await pool.end();
      }
    })();
    const headers = await benchAuth.adminHeaders(tenants.limited.slug);
    const unlimitedHeaders = await benchAuth.adminHeaders(tenants.unlimited.slug);
    const env = (limited: 'yes' | 'no' | 'deferred') => ({
      RATE_LIMIT_BENCH_DATABASE_URL: database.url,
      RATE_LIMIT_BENCH_JWKS: JSON.stringify([benchAuth.jwk]),
      RATE_LIMIT_BENCH_LIMITED: limited,
      RATE_LIMIT_BENCH_STORE: store,
      RATE_LIMIT_BENCH_KEY: `tenant:${tenants.limited.id}`,
    });
    // Started one after the other, so no start-up competes with another.
    const baseline = await startGateway(env('no'));
    gateways.push(baseline);
    const limited = await startGateway(env('yes'));
    gateways.push(limited);
    const deferred = await startGateway(env('deferred'));
    gateways.push(deferred);
    await redis.connect();

    type Side = { readonly gateway: Gateway; readonly path: string; readonly headers: Record<string, string> };
    type Measured = { rps: number; cpuUs: number; redisUs: number };
    const measure = async (side: Side): Promise<Measured> => {
      const pid = side.gateway.child.pid ?? 0;
      const [cpu0, redis0] = [processCpuUs(pid), await redisCpuUs(redis)];
      const result = await load(side.gateway.address + side.path, side.headers, durationSeconds, connections);
      const [cpu1, redis1] = [processCpuUs(pid), await redisCpuUs(redis)];
      if (result.non2xx > 0 || result.errors > 0) {
        throw new Error(`${side.gateway.address}${side.path}: ${result.non2xx} non-2xx responses and ${result.errors} errors`);
      }
      const requests = result.requests.total;
      return { rps: requests / result.duration, cpuUs: (cpu1 - cpu0) / requests, redisUs: (redis1 - redis0) / requests };
    };

    // Per route, every side is measured in the same rounds, in an order that reverses each round
    // (ABC, CBA, …), so both methods' ratios come from the same moments of the run and share
    // their `limited` measurement. The route limited by a fixed bucket has no tenant, so it has
    // no one-gateway method.
    const routes = [
      { route: 'GET /v1/roles (authenticated, PostgreSQL)', path: '/v1/roles', oneGateway: true },
      { route: 'trivial authenticated route', path: '/v1/bench/auth-probe', oneGateway: true },
      { route: 'trivial route, limiter only (no auth; worst case)', path: '/v1/bench/probe', oneGateway: false },
    ];
    const results: ScenarioResult[] = [];
    for (const { route, path, oneGateway } of routes) {
      const sides = {
        baseline: { gateway: baseline, path, headers },
        limited: { gateway: limited, path, headers },
        deferred: { gateway: deferred, path, headers },
        ...(oneGateway && { unlimitedTenant: { gateway: limited, path, headers: unlimitedHeaders } }),
      };
      type SideName = keyof typeof sides;
      const names = Object.keys(sides) as SideName[];
      const sideOf = (name: SideName): Side => {
        const side = sides[name];
        if (!side) throw new Error(`no side ${name}`);
        return side;
      };
      // Warm-up: JIT, keep-alive sockets, caches, the Lua script in Redis's script cache.
      for (const name of names) {
        const side = sideOf(name);
        await load(side.gateway.address + side.path, side.headers, 2, connections);
      }
      const rows: Array<Partial<Record<SideName, Measured>>> = [];
      for (let round = 0; round < rounds; round++) {
        const row: Partial<Record<SideName, Measured>> = {};
        for (const name of round % 2 === 0 ? names : [...names].reverse()) row[name] = await measure(sideOf(name));
        rows.push(row);
        say(
          `${route} (${store}) round ${round + 1}: ` +
            names
              .map((name) => {
                const m = row[name];
                return m
                  ? `${name} ${Math.round(m.rps)} req/s, CPU ${m.cpuUs.toFixed(1)} µs/req, redis-server ${m.redisUs.toFixed(1)} µs/req`
                  : '';
              })
              .join('; '),
        );
      }
      const comparisons: Array<{ name: string; against: SideName }> = [
        { name: `rate limit: ${route} with the ${store} limiter ÷ without, two gateway processes, req/s`, against: 'baseline' },
        {
          name: `rate limit: ${route} with the ${store} limiter ÷ a gateway without it whose requests wait one event-loop turn, req/s`,
          against: 'deferred',
        },
        ...(oneGateway
          ? [
              {
                name: `rate limit: ${route}, one gateway, limited tenant ÷ unlimited Enterprise tenant (${store} store), req/s`,
                against: 'unlimitedTenant' as const,
              },
            ]
          : []),
      ];
      for (const { name, against } of comparisons) {
        const pairs = rows.map((row) => {
          const [l, b] = [row.limited, row[against]];
          if (!l || !b) throw new Error('unreachable: every side is measured every round');
          return { limited: l, baseline: b };
        });
        // Medians: one round disturbed by a neighbour's load spike does not move the result.
        const of = (pick: (p: { baseline: Measured; limited: Measured }) => number, digits = 1) =>
          Number(median(pairs.map(pick)).toFixed(digits));
        results.push({
          name,
          ours: Math.round(median(pairs.map((p) => p.limited.rps))),
          baseline: Math.round(median(pairs.map((p) => p.baseline.rps))),
          ratio: of((p) => p.limited.rps / p.baseline.rps, 3),
          cpuUsPerRequest: {
            ours: of((p) => p.limited.cpuUs),
            baseline: of((p) => p.baseline.cpuUs),
            redisOurs: of((p) => p.limited.redisUs),
            redisBaseline: of((p) => p.baseline.redisUs),
          },
        });
      }
    }
    return results;
  } finally {
    redis.disconnect();
    await Promise.all(gateways.map((gateway) => stopChild(gateway.child)));
    await database.drop();
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
    const stores = (process.env.RATE_LIMIT_BENCH_STORES ?? 'redis,memory').split(',').map((s) => z.enum(['redis', 'memory']).parse(s));
    const rounds = process.env.RATE_LIMIT_BENCH_ROUNDS ? Number(process.env.RATE_LIMIT_BENCH_ROUNDS) : undefined;
    for (const store of stores) {
      for (const result of await runRateLimitBench({ store, ...(rounds && { rounds }) }))
        process.stdout.write(`${JSON.stringify(result)}\n`);
    }
  }
}
