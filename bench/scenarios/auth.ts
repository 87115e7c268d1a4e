/**
 * Auth overhead benchmark: the same route (GET /v1/roles, one indexed query under row-level
 * security) served through the auth plugin (bearer token verified, tenant looked up, permission
 * checked) and without it (a hook that sets a fixed `request.auth`). Goal: ratio ≥ 0.85.
 *
 *   node bench/scenarios/auth.ts        # BENCH_DURATION seconds per run (default 10)
 *
 * The gateways run in a child process, so autocannon does not share their event loop. Each
 * side is run three times, alternating, and the better run counts (machine noise only ever
 * slows). Besides req/s it reports the gateway's CPU time per request, which a busy machine
 * disturbs far less than throughput.
 * One token is reused for every request, as a client does for its 15 minutes; both sides get
 * the same request bytes (the baseline ignores the headers).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import type { FastifyInstance } from 'fastify';
import { createBenchDatabase } from '../support/database.ts';
import { Registry } from 'prom-client';
import { createDatabasePool } from '../../shared/db/pool.ts';
import { createGateway, type V1Capability } from '../../services/gateway/app.ts';
import { authenticated, createAuthDeps } from '../../services/auth/plugin.ts';
import { rolesRoutes } from '../../services/auth/routes.ts';
import { createKeyRing, generatePrivateJwk } from '../../services/auth/keys.ts';
import { provisionTenant } from '../../services/tenants/provision.ts';

export type AuthBenchResult = {
  readonly name: string;
  /** Requests per second through the auth plugin. */
  readonly ours: number;
  /** Requests per second of the same route without it. */
  readonly baseline: number;
  readonly ratio: number;
  /** The same comparison on a route that does no work at all: the plugin's cost laid bare. */
  readonly emptyRoute: Comparison;
  /**
   * Gateway CPU time per request (µs), with ÷ without: the throughput the gateway process could
   * reach if CPU-bound. Robust on a busy machine, where req/s mostly measures the neighbours.
   */
  readonly cpuPerRequestUs: { readonly roles: CpuComparison; readonly emptyRoute: CpuComparison };
};

type Comparison = { readonly ours: number; readonly baseline: number; readonly ratio: number };
type CpuComparison = { readonly ours: number; readonly baseline: number; readonly ratio: number };

const say = (message: string) => process.stderr.write(`[bench auth] ${message}\n`);
const SERVER_FLAG = '--auth-bench-server';

/** Child process: both gateways on one database; prints their ports and a token as JSON. */
async function serve(databaseUrl: string): Promise<void> {
  const pool = await createDatabasePool(databaseUrl, { maximumPoolSize: 20 });
  const { tenant } = await provisionTenant(pool, { slug: `bench-${randomBytes(4).toString('hex')}`, plan: 'enterprise' });
  const auth = await createAuthDeps({
    pool,
    config: { JWT_ISSUER: 'bench', JWT_AUDIENCE: 'bench', JWT_PRIVATE_JWKS: undefined, DATA_DIR: '.tmp/bench-auth' },
    keys: await createKeyRing([await generatePrivateJwk()]),
  });
  const ping: V1Capability = async (v1) => {
    v1.get('/ping', { config: { permission: 'roles:read' } }, async () => ({ ok: true }));
  };
  // Both gateways live in this process and are loaded one at a time, so the process's CPU
  // time over a run is that gateway's.
  const cpu = async (app: FastifyInstance) => {
    app.get('/bench/cpu', async () => process.cpuUsage());
  };
  const gateway = (v1: V1Capability) =>
    createGateway({
      config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'production' },
      readiness: [],
      registry: new Registry(),
      v1: [v1],
      publicRoutes: [cpu],
    });
  const withAuth = await gateway(authenticated(auth, rolesRoutes(auth), ping));
  const fixedContext = {
    tenantId: tenant.id,
    tenantSlug: tenant.slug,
    plan: tenant.plan,
    rateLimitOverride: null,
    userId: 'bench',
    roles: ['admin'],
  };
  const withoutAuth = await gateway(async (v1) => {
    await v1.register(async (scope) => {
      scope.addHook('onRequest', async (request) => {
        request.auth = fixedContext;
      });
      await rolesRoutes(auth)(scope);
      await ping(scope);
    });
  });
  const [ours, baseline] = await Promise.all([
    withAuth.listen({ port: 0, host: '127.0.0.1' }),
    withoutAuth.listen({ port: 0, host: '127.0.0.1' }),
  ]);
  const { accessToken } = await auth.tokens.issue({ userId: 'bench', tenant: tenant.slug, roles: ['admin'] });
  process.stdout.write(`${JSON.stringify({ ours, baseline, slug: tenant.slug, accessToken })}\n`);
}

async function load(url: string, headers: Record<string, string>, seconds: number): Promise<{ rps: number; cpuUsPerRequest: number }> {
  const origin = new URL(url).origin;
  const cpuNow = async () => {
    const usage = (await (await fetch(`${origin}/bench/cpu`)).json()) as { user: number; system: number };
    return usage.user + usage.system;
  };
  const before = await cpuNow();
  const result = await autocannon({ url, headers, connections: 32, duration: seconds });
  const cpuUs = (await cpuNow()) - before;
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${url}: ${result.non2xx} non-2xx, ${result.errors} errors`);
  return { rps: result.requests.average, cpuUsPerRequest: cpuUs / Math.max(1, result.requests.total) };
}

export async function authBench(options: { databaseUrl?: string; seconds?: number } = {}): Promise<AuthBenchResult> {
  const seconds = options.seconds ?? Number(process.env.BENCH_DURATION ?? 10);
  const database = await createBenchDatabase('bench_auth', options.databaseUrl);
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), SERVER_FLAG, database.url], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    const ready = await new Promise<{ ours: string; baseline: string; slug: string; accessToken: string }>((resolve, reject) => {
      let buffered = '';
      child.stdout.on('data', (chunk: Buffer) => {
        buffered += chunk.toString();
        if (buffered.includes('\n')) resolve(JSON.parse(buffered.split('\n')[0] ?? ''));
      });
      child.once('exit', (code) => reject(new Error(`bench server exited (${code})`)));
    });
    const headers = { authorization: `Bearer ${ready.accessToken}`, 'x-tenant': ready.slug };
    const compare = async (path: string, rounds: number) => {
      // Warm up both (JIT, pool connections, caches), then alternate.
      await load(`${ready.ours}${path}`, headers, 2);
      await load(`${ready.baseline}${path}`, headers, 2);
      const ours: Array<{ rps: number; cpuUsPerRequest: number }> = [];
      const baseline: Array<{ rps: number; cpuUsPerRequest: number }> = [];
      for (let round = 0; round < rounds; round++) {
        const a = await load(`${ready.ours}${path}`, headers, seconds);
        const b = await load(`${ready.baseline}${path}`, headers, seconds);
        ours.push(a);
        baseline.push(b);
        say(
          `${path} round ${round + 1}: with auth ${a.rps.toFixed(0)} req/s (${a.cpuUsPerRequest.toFixed(0)} µs CPU/req), without ${b.rps.toFixed(0)} req/s (${b.cpuUsPerRequest.toFixed(0)} µs CPU/req)`,
        );
      }
      // Best run of each: noise from the rest of the machine only ever makes a run worse.
      const most = (runs: typeof ours) => Math.max(...runs.map((r) => r.rps));
      const least = (runs: typeof ours) => Math.min(...runs.map((r) => r.cpuUsPerRequest));
      return {
        throughput: { ours: most(ours), baseline: most(baseline), ratio: most(ours) / most(baseline) },
        cpu: { ours: least(ours), baseline: least(baseline), ratio: least(baseline) / least(ours) },
      };
    };
    const roles = await compare('/v1/roles', 3);
    const empty = await compare('/v1/ping', 3);
    const result: AuthBenchResult = {
      name: 'auth: GET /v1/roles with vs without the auth plugin',
      ...roles.throughput,
      emptyRoute: empty.throughput,
      cpuPerRequestUs: { roles: roles.cpu, emptyRoute: empty.cpu },
    };
    say(
      `throughput ratio ${result.ratio.toFixed(3)} on /v1/roles (goal ≥ 0.85), ${empty.throughput.ratio.toFixed(3)} on an empty route; ` +
        `CPU-per-request ratio ${roles.cpu.ratio.toFixed(3)} / ${empty.cpu.ratio.toFixed(3)}`,
    );
    return result;
  } finally {
    child.kill('SIGTERM');
    await database.drop().catch(() => undefined);
  }
}

if (process.argv[2] === SERVER_FLAG && process.argv[3]) {
  await serve(process.argv[3]);
} else if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  process.stdout.write(`${JSON.stringify(await authBench(), null, 2)}\n`);
}
