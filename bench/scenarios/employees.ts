/**
 * Employees benchmarks at scale. Each exported scenario returns a metrics object;
 * `bench/run.ts` collects them, and running this file directly runs them all in order:
 *
 *   node bench/scenarios/employees.ts            # 1,000,000 employees (BENCH_EMPLOYEES to change)
 *
 * Setup: a fresh database on DATABASE_URL's server (default 127.0.0.1:5432), migrated; two
 * tenants (1,000 and BENCH_EMPLOYEES employees) bulk-imported as events; the read model built by
 * a replay (measured); then the service itself (`services/main.ts`) started as a child process,
 * so client and server do not share one event loop, and driven over HTTP.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import autocannon from 'autocannon';
import pg from 'pg';
import { z } from 'zod';
import { createDatabasePool, sql, type DatabasePool } from '../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../shared/event-store/postgres/eventStore.ts';
import { comparePositions, parsePosition, type GlobalPosition } from '../../shared/event-store/port.ts';
import { createBenchDatabase } from '../support/database.ts';
import { provisionTenant } from '../../services/tenants/provision.ts';
import { employeesProjection } from '../../projections/employees/employeesProjection.ts';
import { readCheckpoint } from '../../shared/projections/checkpoints.ts';
import { replayProjection } from '../../shared/projections/replay.ts';
import { freePort, percentile, waitForHttp } from '../support/measure.ts';
import { createBenchAuth, serviceEnv, stopChild } from '../support/services.ts';
import { benchEventStore, importEmployees } from '../support/employeesImport.ts';

export type EmployeesBenchEnv = {
  readonly pool: DatabasePool;
  readonly databaseUrl: string;
  readonly baseUrl: string;
  readonly small: BenchTenant;
  readonly large: BenchTenant;
  close(): Promise<void>;
};

type BenchTenant = {
  readonly tenantId: string;
  readonly slug: string;
  readonly employees: number;
  readonly headers: Record<string, string>;
};

const say = (message: string) => process.stderr.write(`[bench employees] ${message}\n`);

/** Replays the employees projection from the first event (shadow tables + swap), measured. */
export async function replayThroughput(env: Pick<EmployeesBenchEnv, 'pool' | 'databaseUrl'>, batchSize = 5_000) {
  const store = benchEventStore(env.pool);
  const started = Date.now();
  const result = await replayProjection(env.pool, store, employeesProjection, { batchSize });
  const ms = Date.now() - started;
  await store.close();
  const eventsPerSecond = Math.round(result.processed / (ms / 1000));
  return {
    scenario: 'employees.replay',
    events: result.processed,
    ms,
    eventsPerSecond,
    goal: '≥ 50,000 events/s',
    met: eventsPerSecond >= 50_000,
  };
}

/** Waits until the employees projection has reached the head of the log (nothing left to catch up). */
async function settled(pool: DatabasePool, timeoutMs: number): Promise<void> {
  const store = createPostgresEventStore(pool);
  try {
    const head = await store.headPosition();
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const behind = await pool.anyFirst(sql.type(z.object({ name: z.string() }))`
        select name from projection_checkpoints
        where name = ${employeesProjection.name}
          and (commit_position, prepare_position) < (${head.commit.toString()}::numeric, ${head.prepare.toString()}::numeric)
      `);
      if (behind.length === 0) return;
      if (Date.now() > deadline) throw new Error(`projections still behind: ${behind.join(', ')}`);
      await new Promise((r) => setTimeout(r, 1_000));
    }
  } finally {
    await store.close();
  }
}

/**
 * Creates the database, imports both tenants, builds the read model (replay) and starts the
 * service. `replay` holds the replay measurement.
 */
export async function setUpEmployeesBench(options: { employees?: number; port?: number } = {}) {
  const employees = options.employees ?? Number(process.env.BENCH_EMPLOYEES ?? 1_000_000);
  const port = options.port ?? (await freePort());
  const database = await createBenchDatabase('bench_employees');
  const databaseUrl = database.url;
  const pool = await createDatabasePool(databaseUrl, { maximumPoolSize: 10 });

  const { jwk, adminHeaders } = await createBenchAuth();
  const tenant = async (count: number): Promise<BenchTenant> => {
    const slug = `bench-${count}-${Date.now().toString(36)}`;
    const { tenant: t } = await provisionTenant(pool, { slug, plan: 'enterprise' });
    return { tenantId: t.id, slug, employees: count, headers: await adminHeaders(slug) };
  };
  const small = await tenant(1_000);
  const large = await tenant(employees);
  say(`importing ${small.employees} + ${large.employees} employees as events (COPY, one transaction each)`);
  const imports = [
    await importEmployees(databaseUrl, small.tenantId, small.employees),
    await importEmployees(databaseUrl, large.tenantId, large.employees),
  ];
  say(`imported: ${JSON.stringify(imports)}`);
  await pool.query(sql.type(z.object({}))`analyze es_events`);
  say('replaying the employees projection');
  const replay = await replayThroughput({ pool, databaseUrl });
  say(`replay: ${JSON.stringify(replay)}`);
  await pool.query(sql.type(z.object({}))`analyze employees`);

  // The scaled-out topology: a gateway process and the employees projector process.
  const childEnv = { ...process.env, ...serviceEnv(databaseUrl, jwk) };
  const start = (port: number, ...role: string[]): ChildProcess =>
    spawn(process.execPath, ['services/main.ts', ...role], {
      env: { ...childEnv, PORT: String(port) },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
  // Each role listens on PORT (the projector for its health endpoint): one port each.
  const children = [start(port, 'gateway'), start(await freePort(), 'projector', 'employees')];
  const baseUrl = `http://127.0.0.1:${port}`;
  await waitForHttp(`${baseUrl}/health/ready`, 60_000);
  say(`gateway up at ${baseUrl}, employees projector running (pids ${children.map((c) => c.pid).join(', ')})`);
  await settled(pool, 30 * 60_000);
  say('projectors caught up');

  const env: EmployeesBenchEnv = {
    pool,
    databaseUrl,
    baseUrl,
    small,
    large,
    async close() {
      for (const child of children) await stopChild(child);
      await pool.end();
      if (process.env.BENCH_KEEP_DB !== '1') await database.drop();
    },
  };
  return { env, imports, replay };
}

const run = (options: autocannon.Options) =>
  new Promise<autocannon.Result>((resolve, reject) => {
    autocannon(options, (error, result) => (error ? reject(error) : resolve(result)));
  });

const LIST_QUERIES: Record<string, string> = {
  'no filter': '',
  status: '?status=on_leave',
  department: '?department=sales',
  'department+status': '?department=sales&status=active',
  'hired range (1 year)': `?hiredFrom=${new Date(Date.now() - 2 * 365 * 86_400_000).toISOString().slice(0, 10)}&hiredTo=${new Date(Date.now() - 365 * 86_400_000).toISOString().slice(0, 10)}`,
  'page 50': '?page=50&limit=20',
};

/**
 * GET /v1/employees at concurrency 32, for each filter, on the 1k and the 1M tenant: p50/p99
 * and the ratio of p99 at 1M to p99 at 1k (goal ≤ 1.5).
 */
export async function listLatency(env: EmployeesBenchEnv, options: { durationSeconds?: number; connections?: number } = {}) {
  const duration = options.durationSeconds ?? 8;
  const connections = options.connections ?? 32;
  const results = [];
  for (const [label, query] of Object.entries(LIST_QUERIES)) {
    const measure = async (tenant: BenchTenant) => {
      const r = await run({ url: `${env.baseUrl}/v1/employees${query}`, headers: tenant.headers, connections, duration });
      // Failures are reported with the latencies, never dropped: a fast 5xx is not a result.
      return {
        requestsPerSecond: Math.round(r.requests.average),
        p50: r.latency.p50,
        p99: r.latency.p99,
        non2xx: r.non2xx,
        errors: r.errors,
        statusCodes: Object.fromEntries(Object.entries(r.statusCodeStats ?? {}).map(([code, stat]) => [code, stat?.count ?? 0])),
      };
    };
    const small = await measure(env.small);
    const large = await measure(env.large);
    const ratio = Number((large.p99 / Math.max(small.p99, 1)).toFixed(2));
    results.push({ filter: label, query, small, large, p99Ratio: ratio, met: ratio <= 1.5 });
    say(`GET ${label}: 1k p99 ${small.p99} ms, ${env.large.employees} p99 ${large.p99} ms, ratio ${ratio}`);
  }
  return { scenario: 'employees.list', connections, durationSeconds: duration, goal: 'p99(1M) / p99(1k) ≤ 1.5', results };
}

/** POST /v1/employees as fast as it goes at concurrency 32, unique emails: sustained rate and p99. */
export async function createThroughput(env: EmployeesBenchEnv, options: { durationSeconds?: number; connections?: number } = {}) {
  const duration = options.durationSeconds ?? 10;
  const connections = options.connections ?? 32;
  let n = 0;
  const prefix = Date.now().toString(36);
  const r = await run({
    url: `${env.baseUrl}/v1/employees`,
    method: 'POST',
    connections,
    duration,
    headers: { ...env.small.headers, 'content-type': 'application/json' },
    requests: [
      {
        setupRequest: (request) => ({
          ...request,
          body: JSON.stringify({ email: `load-${prefix}-${n++}@bench.example`, firstName: 'Load', lastName: 'Test', department: 'sales' }),
        }),
      },
    ],
  });
  const created = r['2xx'];
  const perSecond = Math.round(created / duration);
  return {
    scenario: 'employees.create',
    connections,
    durationSeconds: duration,
    created,
    errors: r.non2xx + r.errors,
    createsPerSecond: perSecond,
    p50: r.latency.p50,
    p99: r.latency.p99,
    goal: '≥ 5,000 creates/s with p99 ≤ 20 ms',
    met: perSecond >= 5_000 && r.latency.p99 <= 20,
  };
}

/**
 * Projection lag at a fixed write rate: creates are sent at `rate`/s (open loop, in 10 ms
 * ticks); for each one, lag = from its 201 to the moment the projection checkpoint covers its
 * X-Log-Position (what a read-your-writes read would wait). Goal p95 ≤ 50 ms at 1,000/s.
 */
export async function projectionLag(env: EmployeesBenchEnv, options: { rate?: number; durationSeconds?: number } = {}) {
  const rate = options.rate ?? 1_000;
  const durationMs = (options.durationSeconds ?? 10) * 1000;
  const pending: Array<{ position: GlobalPosition; at: number }> = [];
  const lags: number[] = [];
  let sent = 0;
  let failed = 0;
  const prefix = Date.now().toString(36);
  const inFlight = new Set<Promise<void>>();
  let sampling = true;
  const sampler = (async () => {
    // Stops when told to: writes the projection never reached by the deadline stay in `pending`
    // and are reported as unreached instead of hanging the run.
    while (sampling) {
      const checkpoint = await readCheckpoint(env.pool, employeesProjection.name);
      const now = performance.now();
      if (checkpoint) {
        for (let i = pending.length - 1; i >= 0; i--) {
          const write = pending[i];
          if (write && comparePositions(checkpoint.position, write.position) >= 0) {
            lags.push(now - write.at);
            pending.splice(i, 1);
          }
        }
      }
      await new Promise((r) => setTimeout(r, 2));
    }
  })();
  const send = async (i: number) => {
    // Open loop: a refused or reset connection is a failed write, not the end of the run.
    const response = await fetch(`${env.baseUrl}/v1/employees`, {
      method: 'POST',
      headers: { ...env.small.headers, 'content-type': 'application/json' },
      body: JSON.stringify({ email: `lag-${prefix}-${i}@bench.example`, firstName: 'Lag', lastName: 'Test' }),
    }).catch(() => null);
    if (!response) {
      failed++;
      return;
    }
    await response.arrayBuffer();
    const position = parsePosition(response.headers.get('x-log-position') ?? '');
    if (response.status !== 201 || !position) failed++;
    else pending.push({ position, at: performance.now() });
  };
  const started = performance.now();
  while (performance.now() - started < durationMs) {
    const due = Math.floor(((performance.now() - started) / 1000) * rate);
    while (sent < due) {
      const p = send(sent++).finally(() => inFlight.delete(p));
      inFlight.add(p);
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  await Promise.all(inFlight);
  const achieved = Math.round(sent / (durationMs / 1000));
  const deadline = performance.now() + 30_000;
  while (pending.length > 0 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  sampling = false;
  await sampler;
  lags.sort((a, b) => a - b);
  const p95 = Number(percentile(lags, 95).toFixed(1));
  return {
    scenario: 'employees.projectionLag',
    targetRate: rate,
    achievedRate: achieved,
    writes: lags.length,
    failed,
    unreached: pending.length,
    p50: Number(percentile(lags, 50).toFixed(1)),
    p95,
    p99: Number(percentile(lags, 99).toFixed(1)),
    goal: 'p95 ≤ 50 ms at 1,000 writes/s',
    met: p95 <= 50 && achieved >= rate * 0.95 && pending.length === 0,
  };
}

/** How `meta.total` is computed at 1M: EXPLAIN ANALYZE of the counter read vs counting the rows. */
export async function countCost(env: EmployeesBenchEnv) {
  const client = new pg.Client({ connectionString: env.databaseUrl });
  await client.connect();
  try {
    const executionMs = async (text: string) => {
      const { rows } = await client.query<Record<string, string>>(`explain analyze ${text}`, [env.large.tenantId]);
      return Number(/Execution Time: ([\d.]+) ms/.exec(rows.map((r) => Object.values(r)[0]).join('\n'))?.[1] ?? Number.NaN);
    };
    return {
      scenario: 'employees.countCost',
      employees: env.large.employees,
      countersMs: await executionMs('select coalesce(sum(count), 0) from employee_counts where tenant_id = $1::uuid'),
      countStarMs: await executionMs('select count(*) from employees where tenant_id = $1::uuid'),
    };
  } finally {
    await client.end();
  }
}

/** Runs every scenario in order and prints one JSON document. */
export async function runEmployeesBench() {
  const { env, imports, replay } = await setUpEmployeesBench();
  try {
    const counts = await countCost(env);
    say(`count cost: ${JSON.stringify(counts)}`);
    const list = await listLatency(env);
    const create = await createThroughput(env);
    say(`create: ${JSON.stringify(create)}`);
    const lag = await projectionLag(env);
    say(`lag: ${JSON.stringify(lag)}`);
    return { imports, replay, counts, list, create, lag };
  } finally {
    await env.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const results = await runEmployeesBench();
  process.stdout.write(`${JSON.stringify(results, null, 2)}\n`);
}
