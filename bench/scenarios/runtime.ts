/**
 * The process itself: cold start to ready, Node RSS at idle and under a sustained mixed load, on
 * the embedded default exactly as `npm start` runs it (its environment assignments and node flags
 * are read from package.json's `start` script; embedded PostgreSQL in a fresh data directory). Baseline in the same run: a bare Node process serving
 * one Fastify route (what any Fastify service costs before it does anything).
 *
 *   npm run bench -- runtime          # BENCH_SOAK_SECONDS (default 120), BENCH_SOAK_RATE (default 400 req/s)
 *
 * The load is a mix of creates, list pages, single reads and the KPI summary from 16
 * connections at a fixed overall rate; RSS is sampled every second from /proc.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import autocannon from 'autocannon';
import { freePort, waitForHttp } from '../support/measure.ts';
import { stopChild } from '../support/services.ts';

type Sample = { readonly at: number; readonly rssMb: number };

/**
 * `npm start`'s command line from package.json (`[NAME=value …] node [--flag …] services/main.ts`),
 * so the bench runs what `npm start` runs and a flag changed there is measured here.
 */
export function startCommand(script: string): { readonly env: Record<string, string>; readonly nodeArgs: readonly string[] } {
  const words = script.trim().split(/\s+/);
  const node = words.indexOf('node');
  const entry = words.indexOf('services/main.ts');
  if (node < 0 || entry < node) throw new Error(`unexpected start script: ${script}`);
  const env: Record<string, string> = {};
  for (const word of words.slice(0, node)) {
    const match = /^([A-Z_][A-Z0-9_]*)=(\S*)$/.exec(word);
    if (!match?.[1] || match[2] === undefined) throw new Error(`unexpected start script: ${script}`);
    env[match[1]] = match[2];
  }
  return { env, nodeArgs: words.slice(node + 1, entry + 1) };
}

async function npmStartCommand(root: string) {
  const manifest: unknown = JSON.parse(await readFile(join(root, 'package.json'), 'utf8'));
  const scripts = typeof manifest === 'object' && manifest !== null && 'scripts' in manifest ? manifest.scripts : undefined;
  const start = typeof scripts === 'object' && scripts !== null && 'start' in scripts ? scripts.start : undefined;
  if (typeof start !== 'string') throw new Error('package.json has no start script');
  return startCommand(start);
}

const rssMb = async (pid: number) => {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 'NaN');
  return Math.round((kb / 1024) * 10) / 10;
};

async function bareFastifyRss(): Promise<number> {
  const code = `const f = (await import('fastify')).default({ logger: false }); f.get('/', async () => ({ ok: true })); await f.listen({ port: 0, host: '127.0.0.1' }); process.stdout.write('up\\n');`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', code], {
    cwd: resolve(import.meta.dirname, '../..'),
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise((r) => child.stdout?.once('data', r));
  await new Promise((r) => setTimeout(r, 3_000));
  const rss = await rssMb(child.pid ?? 0);
  await stopChild(child);
  return rss;
}

export async function runRuntimeBench(): Promise<Record<string, unknown>> {
  const seconds = Number(process.env.BENCH_SOAK_SECONDS ?? 120);
  const rate = Number(process.env.BENCH_SOAK_RATE ?? 400);
  const root = resolve(import.meta.dirname, '../..');
  const npmStart = await npmStartCommand(root);
  const [port, pgPort] = [await freePort(), await freePort()];
  const dataDir = await mkdtemp(join(tmpdir(), 'eas-runtime-bench-'));
  const password = `pw-${randomBytes(8).toString('hex')}`;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    ...npmStart.env,
    PORT: String(port),
    EMBEDDED_PG_PORT: String(pgPort),
    DATA_DIR: dataDir,
    LOG_LEVEL: 'warn',
    BOOTSTRAP_TENANT: 'bench',
    BOOTSTRAP_PLAN: 'enterprise',
    BOOTSTRAP_ADMIN_EMAIL: 'admin@bench.test',
    BOOTSTRAP_ADMIN_PASSWORD: password,
  };
  for (const engine of ['DATABASE_URL', 'EVENTSTORE_URL', 'KAFKA_BROKERS', 'REDIS_URL', 'OTEL_EXPORTER_OTLP_ENDPOINT']) delete env[engine];
  const base = `http://127.0.0.1:${port}`;
  const start = async () => {
    const started = performance.now();
    const child = spawn(process.execPath, [...npmStart.nodeArgs], { cwd: root, env, stdio: ['ignore', 'ignore', 'inherit'] });
    await waitForHttp(`${base}/health/ready`, 60_000, { intervalMs: 25 }); // 25 ms: start-up is timed to it
    return { child, readyMs: Math.round(performance.now() - started) };
  };
  try {
    const cold = await start();
    await new Promise((r) => setTimeout(r, 5_000));
    const idleCold = await rssMb(cold.child.pid ?? 0);
    await stopChild(cold.child);
    const warm = await start();
    const child = warm.child;
    await new Promise((r) => setTimeout(r, 5_000));
    const idle = await rssMb(child.pid ?? 0);

    const login = await fetch(`${base}/v1/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-tenant': 'bench' },
      body: JSON.stringify({ email: 'admin@bench.test', password }),
    });
    const { accessToken } = (await login.json()) as { accessToken: string };
    const headers = { authorization: `Bearer ${accessToken}`, 'x-tenant': 'bench', 'content-type': 'application/json' };
    const first = await fetch(`${base}/v1/employees`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ email: 'first@bench.test', firstName: 'F', lastName: 'L', department: 'eng' }),
    });
    const { id } = (await first.json()) as { id: string };

    const samples: Sample[] = [];
    const t0 = Date.now();
    const sampler = setInterval(
      () =>
        void rssMb(child.pid ?? 0).then(
          (rss) => samples.push({ at: Date.now() - t0, rssMb: rss }),
          () => undefined,
        ),
      1_000,
    );
    let n = 0;
    const result = await autocannon({
      url: base,
      connections: 16,
      duration: seconds,
      overallRate: rate,
      headers,
      requests: [
        {
          method: 'POST',
          path: '/v1/employees',
          setupRequest: (req) => ({
            ...req,
            body: JSON.stringify({
              email: `e${n++}-${randomBytes(3).toString('hex')}@bench.test`,
              firstName: 'Soak',
              lastName: 'Test',
              department: `d${n % 20}`,
            }),
          }),
        },
        { method: 'GET', path: '/v1/employees?limit=20' },
        { method: 'GET', path: `/v1/employees/${id}` },
        { method: 'GET', path: '/v1/analytics/kpi' },
      ],
    });
    clearInterval(sampler);
    const loaded = samples.map((s) => s.rssMb);
    const report = {
      unit: 'MB (Node process RSS; the embedded PostgreSQL processes are not counted)',
      command: { env: npmStart.env, nodeArgs: npmStart.nodeArgs },
      coldStartToReadyMs: cold.readyMs,
      warmStartToReadyMs: warm.readyMs,
      idleRssColdStart: idleCold,
      idleRss: idle,
      load: {
        seconds,
        targetRate: rate,
        requests: result.requests.total,
        non2xx: result.non2xx,
        errors: result.errors,
        p99Ms: result.latency.p99,
        averageRate: result.requests.average,
      },
      loadedRss: {
        first: loaded[0],
        peak: Math.max(...loaded),
        last: loaded.at(-1),
        atQuarterMarks: [0.25, 0.5, 0.75, 1].map((q) => loaded[Math.max(0, Math.round(loaded.length * q) - 1)]),
      },
      baselineBareFastifyIdleRss: await bareFastifyRss(),
    };
    await stopChild(child);
    return report;
  } finally {
    await rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
  }
}
