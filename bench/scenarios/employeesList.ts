/**
 * Cheap list reads: `GET /v1/employees?limit=20` through the real gateway process
 * (auth, tenant scope, rate limiter, zod, row-level security) ÷ a bare Fastify + pg server
 * running the SAME SQL statement (`listEmployeesStatement`) on the same database, without any
 * of that. Both are child processes (the load generator never shares their event loop);
 * rounds alternate baseline/ours in ABBA order and each side's figure is the median.
 *
 *   npm run bench -- employees-list     # BENCH_LIST_EMPLOYEES (2,000), BENCH_LIST_ROUNDS (4), BENCH_DURATION (5 s)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import Fastify from 'fastify';
import pg from 'pg';
import { z } from 'zod';
import { createDatabasePool, sql } from '../../shared/db/pool.ts';
import { provisionTenant } from '../../services/tenants/provision.ts';
import { employeesProjection } from '../../projections/employees/employeesProjection.ts';
import { listEmployees, listEmployeesStatement } from '../../projections/employees/queries.ts';
import { createTenantReader } from '../../shared/db/tenantReader.ts';
import { replayProjection } from '../../shared/projections/replay.ts';
import { createBenchDatabase } from '../support/database.ts';
import { benchEventStore, importEmployees } from '../support/employeesImport.ts';
import { listLatency, setUpEmployeesBench } from './employees.ts';
import { freePort, median, waitForHttp } from '../support/measure.ts';
import { createBenchAuth, serviceEnv, stopChild } from '../support/services.ts';

const say = (message: string) => process.stderr.write(`[bench employees-list] ${message}\n`);

/** The baseline: a bare Fastify route that runs the list statement with pg, no auth, no tenant scope, no RLS. */
async function serveBare(): Promise<void> {
  const tenantId = process.env.LIST_BENCH_TENANT ?? '';
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 });
  const app = Fastify({ logger: false });
  const query = z.object({ page: z.coerce.number().default(1), limit: z.coerce.number().default(20) });
  app.get('/v1/employees', async (request) => {
    const { page, limit } = query.parse(request.query);
    const statement = listEmployeesStatement(tenantId, { page, limit });
    // slonik numbers its placeholders `$slonik_N`; pg wants `$N`.
    const text = statement.sql.replace(/\$slonik_(\d+)/g, '$$$1');
    const { rows } = await pool.query<Record<string, unknown>>(text, [...statement.values]);
    const data = rows
      .filter((r) => r.id !== null)
      .map((r) => ({
        id: r.id,
        email: r.email,
        firstName: r.first_name,
        lastName: r.last_name,
        department: r.department,
        status: r.status,
        hiredAt: r.hired_at instanceof Date ? r.hired_at.toISOString() : r.hired_at,
      }));
    return { data, meta: { page, limit, total: Number(rows[0]?.total ?? 0) } };
  });
  // The same read through our own DB paths, without the gateway (auth, limiter, zod, usage
  // samples): what the transaction-free reader buys over `withTenant` on its own.
  const slonikPool = await createDatabasePool(process.env.DATABASE_URL ?? '', { maximumPoolSize: 10 });
  const reader = await createTenantReader(process.env.DATABASE_URL ?? '', { maximumPoolSize: 10 });
  const viaQueries = (scope: Parameters<typeof listEmployees>[0]) => async (request: { query: unknown }) => {
    const { page, limit } = query.parse(request.query);
    const { data, total } = await listEmployees(scope, tenantId, { page, limit });
    return { data: data.map(({ revision: _, ...employee }) => employee), meta: { page, limit, total } };
  };
  app.get('/reader/v1/employees', viaQueries(reader));
  app.get('/transaction/v1/employees', viaQueries(slonikPool));
  const address = await app.listen({ host: '127.0.0.1', port: 0 });
  process.stdout.write(`${JSON.stringify({ url: address })}\n`);
}

function startChild(args: string[], env: NodeJS.ProcessEnv, stdout: 'pipe' | 'ignore' | 'inherit' = 'pipe'): ChildProcess {
  // BENCH_CPU_PROF=<dir>: CPU profiles of both servers, written when they exit.
  const profile = process.env.BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : [];
  return spawn(process.execPath, [...profile, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', stdout, 'inherit'] });
}

export async function runEmployeesListBench(options: { employees?: number; rounds?: number; seconds?: number } = {}) {
  const employees = options.employees ?? Number(process.env.BENCH_LIST_EMPLOYEES ?? 2_000);
  const rounds = options.rounds ?? Number(process.env.BENCH_LIST_ROUNDS ?? 4);
  const seconds = options.seconds ?? Number(process.env.BENCH_DURATION ?? 5);
  const database = await createBenchDatabase('bench_list');
  const pool = await createDatabasePool(database.url, { maximumPoolSize: 4 });
  const children: ChildProcess[] = [];
  try {
    const { jwk, adminHeaders } = await createBenchAuth();
    const slug = `bench-list-${Date.now().toString(36)}`;
    const { tenant } = await provisionTenant(pool, { slug, plan: 'enterprise' });
    const headers = await adminHeaders(slug);
    await importEmployees(database.url, tenant.id, employees);
    const store = benchEventStore(pool);
    await replayProjection(pool, store, employeesProjection);
    await store.close();
    await pool.query(sql.type(z.object({}))`vacuum analyze employees`);

    const port = await freePort();
    const gateway = startChild(
      ['services/main.ts', 'gateway'],
      { ...serviceEnv(database.url, jwk), PORT: String(port) },
      process.env.BENCH_GATEWAY_STDOUT === '1' ? 'inherit' : 'ignore',
    );
    children.push(gateway);
    const bare = startChild([fileURLToPath(import.meta.url)], {
      LIST_BENCH_ROLE: 'server',
      DATABASE_URL: database.url,
      LIST_BENCH_TENANT: tenant.id,
    });
    children.push(bare);
    const bareUrl = await new Promise<string>((resolve, reject) => {
      bare.once('exit', (code) => reject(new Error(`bare server exited with ${code}`)));
      bare.stdout?.once('data', (chunk: Buffer) => resolve((JSON.parse(chunk.toString()) as { url: string }).url));
    });
    const oursUrl = `http://127.0.0.1:${port}/v1/employees?limit=20`;
    const baselineUrl = `${bareUrl}/v1/employees?limit=20`;
    await waitForHttp(oursUrl, 60_000, { headers });
    // Same answer from both (what the bench compares is the same work).
    const [a, b] = await Promise.all([fetch(oursUrl, { headers }).then((r) => r.json()), fetch(baselineUrl).then((r) => r.json())]);
    if (JSON.stringify(a) !== JSON.stringify(b))
      throw new Error(`baseline and gateway answer differently:\n${JSON.stringify(a).slice(0, 300)}\n${JSON.stringify(b).slice(0, 300)}`);

    const measure = async (url: string, withHeaders: Record<string, string>, duration: number) => {
      const r = await autocannon({ url, headers: withHeaders, connections: 32, duration });
      if (r.non2xx > 0 || r.errors > 0) throw new Error(`${url}: ${r.non2xx} non-2xx, ${r.errors} errors`);
      return { rps: Math.round(r.requests.average), p50: r.latency.p50, p99: r.latency.p99 };
    };
    await measure(baselineUrl, {}, 1); // warm-up
    await measure(oursUrl, headers, 1);
    type Round = { rps: number; p50: number; p99: number };
    const ours: Round[] = [];
    const baseline: Round[] = [];
    const reader: Round[] = [];
    const transaction: Round[] = [];
    const readerUrl = `${bareUrl}/reader/v1/employees?limit=20`;
    const transactionUrl = `${bareUrl}/transaction/v1/employees?limit=20`;
    for (const url of [readerUrl, transactionUrl]) {
      const answer = await fetch(url).then((r) => r.json());
      if (JSON.stringify(answer) !== JSON.stringify(b)) throw new Error(`${url} answers differently`);
    }
    for (let round = 0; round < rounds; round++) {
      const cases: [Round[], string, Record<string, string>][] = [
        [baseline, baselineUrl, {}],
        [ours, oursUrl, headers],
        [reader, readerUrl, {}],
        [transaction, transactionUrl, {}],
      ];
      // Alternate the order (ABBA) so drift does not always hit the same side.
      for (const [into, url, withHeaders] of round % 2 === 0 ? cases : [...cases].reverse())
        into.push(await measure(url, withHeaders, seconds));
      say(
        `round ${round + 1}: gateway ${ours.at(-1)?.rps} req/s, bare ${baseline.at(-1)?.rps}, ` +
          `queries via reader ${reader.at(-1)?.rps}, via withTenant ${transaction.at(-1)?.rps}`,
      );
    }
    const oursRps = median(ours.map((r) => r.rps));
    const baselineRps = median(baseline.map((r) => r.rps));
    const ratio = Number((oursRps / baselineRps).toFixed(2));
    return {
      scenario: 'employees.list-vs-bare',
      employees,
      connections: 32,
      secondsPerRound: seconds,
      ours: { rps: oursRps, p99: median(ours.map((r) => r.p99)), rounds: ours },
      baseline: { rps: baselineRps, p99: median(baseline.map((r) => r.p99)), rounds: baseline },
      ratio,
      // Without the gateway, same bare Fastify: our query path through the reader and through withTenant.
      queriesViaReader: {
        rps: median(reader.map((r) => r.rps)),
        ratioToBare: Number((median(reader.map((r) => r.rps)) / baselineRps).toFixed(2)),
        rounds: reader,
      },
      queriesViaTransaction: {
        rps: median(transaction.map((r) => r.rps)),
        ratioToBare: Number((median(transaction.map((r) => r.rps)) / baselineRps).toFixed(2)),
        rounds: transaction,
      },
      goal: 'authenticated list ÷ bare Fastify + pg (same SQL) ≥ 0.6',
      met: ratio >= 0.6,
    };
  } finally {
    for (const child of children) await stopChild(child);
    await pool.end();
    await database.drop();
  }
}

if (process.env.LIST_BENCH_ROLE === 'server') await serveBare();

/**
 * List p99 at scale: the employees bench's setup (two tenants, 1,000 and
 * BENCH_EMPLOYEES employees imported as events, the read model built by a replay, gateway and
 * projector as child processes) and only its list-latency cases, so the 1-year hire-range total
 * (month/day counters) is measured without the write cases.
 */
export async function runListScaleBench() {
  const { env, replay } = await setUpEmployeesBench();
  try {
    const list = await listLatency(env, { durationSeconds: Number(process.env.BENCH_DURATION ?? 8) });
    return { replay, list };
  } finally {
    await env.close();
  }
}
