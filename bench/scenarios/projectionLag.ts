/**
 * Live projection lag, ours against a baseline commit, in one run (`npm run bench -- lag`).
 *
 *   BENCH_BASELINE_REV=<commit>   the baseline (default: none, ours only). Exported with
 *                                 `git archive` into .tmp/bench-baseline-<rev> (node_modules linked).
 *   BENCH_LAG_ROUNDS=2            alternating rounds baseline/ours; medians reported.
 *   BENCH_LAG_SECONDS=8           length of each lag measurement.
 *
 * Setup: a fresh migrated database, one enterprise tenant with 1,000 employees imported as events
 * and the read model built by a replay. Each side runs as the scaled-out topology (a `gateway`
 * and a `projector employees` process from that side's tree) on the same database, one side at a
 * time. First the highest create rate is measured (ours, 32 connections, 6 s); the lag is then
 * measured at half of it for both sides: open-loop creates, lag = 201 received → projection
 * checkpoint covers its X-Log-Position (what a read-your-writes read waits for).
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, symlinkSync } from 'node:fs';
import { resolve } from 'node:path';
import { createDatabasePool } from '../../shared/db/pool.ts';
import { provisionTenant } from '../../services/tenants/provision.ts';
import { employeesProjection } from '../../projections/employees/employeesProjection.ts';
import { replayProjection } from '../../shared/projections/replay.ts';
import { createBenchDatabase } from '../support/database.ts';
import { benchEventStore, importEmployees } from '../support/employeesImport.ts';
import { createThroughput, projectionLag, type EmployeesBenchEnv } from './employees.ts';
import { freePort, median, waitForHttp } from '../support/measure.ts';
import { createBenchAuth, serviceEnv, stopChild } from '../support/services.ts';

const say = (message: string) => process.stderr.write(`[bench lag] ${message}\n`);
const repoRoot = resolve(import.meta.dirname, '../..');

/** The baseline's sources at `rev`, exported once (no worktree), sharing our node_modules. */
function baselineTree(rev: string): string {
  const dir = resolve(repoRoot, `.tmp/bench-baseline-${rev}`);
  if (!existsSync(resolve(dir, 'services/main.ts'))) {
    mkdirSync(dir, { recursive: true });
    execFileSync('sh', ['-c', `git -C "${repoRoot}" archive "${rev}" | tar -x -C "${dir}"`]);
  }
  if (!existsSync(resolve(dir, 'node_modules'))) symlinkSync(resolve(repoRoot, 'node_modules'), resolve(dir, 'node_modules'));
  return dir;
}

export async function runProjectionLagBench() {
  const rounds = Number(process.env.BENCH_LAG_ROUNDS ?? 2);
  const seconds = Number(process.env.BENCH_LAG_SECONDS ?? 8);
  const baselineRev = process.env.BENCH_BASELINE_REV;
  const sides: Array<{ name: string; dir: string }> = [
    ...(baselineRev ? [{ name: `baseline ${baselineRev}`, dir: baselineTree(baselineRev) }] : []),
    { name: 'ours', dir: repoRoot },
  ];

  const database = await createBenchDatabase('bench_lag');
  const pool = await createDatabasePool(database.url, { maximumPoolSize: 4 });
  const children = new Set<ChildProcess>();
  try {
    const { jwk, adminHeaders } = await createBenchAuth();
    const slug = `bench-lag-${Date.now().toString(36)}`;
    const { tenant } = await provisionTenant(pool, { slug, plan: 'enterprise' });
    const benchTenant = { tenantId: tenant.id, slug, employees: 1_000, headers: await adminHeaders(slug) };
    await importEmployees(database.url, tenant.id, 1_000);
    const store = benchEventStore(pool);
    await replayProjection(pool, store, employeesProjection);
    await store.close();

    const start = async (dir: string) => {
      const port = await freePort();
      const env = { ...process.env, ...serviceEnv(database.url, jwk) };
      // A tree from before plain-Node TypeScript still starts through the tsx loader.
      const loader = /--import tsx/.test(readFileSync(resolve(dir, 'package.json'), 'utf8')) ? ['--import', 'tsx'] : [];
      const spawnRole = (p: number, ...role: string[]) => {
        const child = spawn(process.execPath, [...loader, 'services/main.ts', ...role], {
          cwd: dir,
          env: { ...env, PORT: String(p) },
          stdio: ['ignore', 'ignore', 'inherit'],
        });
        children.add(child);
        child.once('exit', () => children.delete(child));
        return child;
      };
      const running = [spawnRole(port, 'gateway'), spawnRole(await freePort(), 'projector', 'employees')];
      const baseUrl = `http://127.0.0.1:${port}`;
      await waitForHttp(`${baseUrl}/health/ready`, 60_000);
      const benchEnv: EmployeesBenchEnv = {
        pool,
        databaseUrl: database.url,
        baseUrl,
        small: benchTenant,
        large: benchTenant,
        close: async () => undefined,
      };
      return {
        env: benchEnv,
        async stop() {
          await Promise.all(running.map(stopChild));
        },
      };
    };

    // The highest create rate, on our side (the write path is not what this change is about).
    const probe = await start(repoRoot);
    const create = await createThroughput(probe.env, { durationSeconds: 6 });
    await probe.stop();
    const rate = Math.max(10, Math.round(create.createsPerSecond / 2));
    say(`highest create rate ${create.createsPerSecond}/s (p99 ${create.p99} ms): lag measured at ${rate}/s`);

    const runs: Record<string, Array<Awaited<ReturnType<typeof projectionLag>>>> = Object.fromEntries(sides.map((s) => [s.name, []]));
    for (let round = 0; round < rounds; round++) {
      for (const side of sides) {
        const running = await start(side.dir);
        try {
          const lag = await projectionLag(running.env, { rate, durationSeconds: seconds });
          say(`round ${round + 1} ${side.name}: ${JSON.stringify(lag)}`);
          runs[side.name]?.push(lag);
        } finally {
          await running.stop();
        }
      }
    }
    const summary = Object.fromEntries(
      Object.entries(runs).map(([name, lags]) => [
        name,
        {
          achievedRate: median(lags.map((l) => l.achievedRate)),
          p50: median(lags.map((l) => l.p50)),
          p95: median(lags.map((l) => l.p95)),
          p99: median(lags.map((l) => l.p99)),
          failed: lags.reduce((n, l) => n + l.failed + l.unreached, 0),
          rounds: lags.map((l) => ({ p50: l.p50, p95: l.p95, p99: l.p99, achievedRate: l.achievedRate })),
        },
      ]),
    );
    const ours = summary.ours;
    return {
      scenario: 'employees.projectionLag.compare',
      maxCreateRate: create.createsPerSecond,
      rate,
      secondsPerRound: seconds,
      rounds,
      sides: summary,
      goal: 'p95 ≤ 50 ms at half of the highest create rate',
      met: ours !== undefined && ours.p95 <= 50,
    };
  } finally {
    for (const child of children) child.kill('SIGTERM');
    await pool.end();
    if (process.env.BENCH_KEEP_DB !== '1') await database.drop();
  }
}
