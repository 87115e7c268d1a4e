/**
 * `npm run bench -- write`: the write path against two baselines, in one run,
 * alternating rounds (ours, baseline, ours, baseline, …), each figure the median of its rounds
 * and each ratio the median of the per-round ratios.
 *
 * 1. Creates over HTTP: `POST /v1/employees` on our gateway (real PostgreSQL, employees
 *    projector running, enterprise tenant, LOG_LEVEL=warn) vs a state-stored CRUD server
 *    (bench/support/crudServer.ts: Fastify + pg, one INSERT, unique index on
 *    (tenant, lower(email))). autocannon, 32 connections, unique emails. Goal: ours ÷ CRUD ≥ 0.6
 *    with our p99 ≤ 2 × CRUD's.
 * 2. Raw appends: 1,000 streams × 20 one-event appends with the exact expected revision, 16
 *    workers, through our PostgreSQL adapter vs `@event-driven-io/emmett-postgresql`, each in
 *    its own fresh database on the same server. Goal: ours ÷ emmett ≥ 5.
 *
 * Knobs: BENCH_WRITE_ROUNDS (3), BENCH_WRITE_SECONDS (8), BENCH_WRITE_WARMUP_SECONDS (creates' warm-up
 * of each side, not counted; as long as a round), BENCH_WRITE_CONNECTIONS (32),
 * BENCH_WRITE_ONLY (appends | creates), BENCH_WRITE_FLUSHES (our store's maxConcurrentFlushes, 1),
 * BENCH_GATEWAY_NODE_ARGS (e.g. `--cpu-prof --cpu-prof-dir=…` to profile the gateway; it applied
 * to the CRUD server and the projector too before), BENCH_PROJECTOR_NODE_ARGS (the same for
 * `projector employees`).
 * Two cores shared with other work: absolute numbers are noisy, the ratios less so.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { getPostgreSQLEventStore } from '@event-driven-io/emmett-postgresql';
import { STREAM_DOES_NOT_EXIST } from '@event-driven-io/emmett';
import autocannon from 'autocannon';
import { z } from 'zod';
import { createDatabasePool, sql } from '../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../shared/event-store/postgres/eventStore.ts';
import { provisionTenant } from '../../services/tenants/provision.ts';
import { createBenchDatabase } from '../support/database.ts';
import { cpuMillis, freePort, median, waitForHttp } from '../support/measure.ts';
import { createBenchAuth, serviceEnv, stopChild } from '../support/services.ts';
import { measureSealingCost } from '../support/sealingCost.ts';

const say = (message: string) => process.stderr.write(`[bench write] ${message}\n`);
const round2 = (n: number) => Number(n.toFixed(2));

const STREAMS = 1_000;
const APPENDS_PER_STREAM = 20;
const WORKERS = 16;

/** The append workload: worker w owns streams w, w+16, …; it walks revision by revision. */
async function appendWorkload(
  appendOne: (stream: string, revision: number) => Promise<void>,
): Promise<{ appends: number; ms: number; perSecond: number }> {
  const prefix = randomUUID().slice(0, 8);
  const started = performance.now();
  await Promise.all(
    Array.from({ length: WORKERS }, async (_, w) => {
      const mine: string[] = [];
      for (let s = w; s < STREAMS; s += WORKERS) mine.push(`bench-${prefix}-${s}`);
      for (let revision = 0; revision < APPENDS_PER_STREAM; revision++) {
        for (const stream of mine) await appendOne(stream, revision);
      }
    }),
  );
  const ms = performance.now() - started;
  const appends = STREAMS * APPENDS_PER_STREAM;
  return { appends, ms: Math.round(ms), perSecond: Math.round(appends / (ms / 1000)) };
}

async function appendsBench(rounds: number) {
  const oursDb = await createBenchDatabase('bench_write_ours');
  const emmettDb = await createBenchDatabase('bench_write_emmett');
  const pool = await createDatabasePool(oursDb.url, { maximumPoolSize: WORKERS });
  const ours = createPostgresEventStore(pool, { maxConcurrentFlushes: Number(process.env.BENCH_WRITE_FLUSHES ?? 1) });
  const emmett = getPostgreSQLEventStore(emmettDb.url);
  try {
    const runOurs = () =>
      appendWorkload(async (stream, revision) => {
        await ours.append(stream, [{ id: randomUUID(), type: 'Tick', data: { revision } }], {
          expectedRevision: revision === 0 ? 'no_stream' : revision - 1,
        });
      });
    const runEmmett = () =>
      appendWorkload(async (stream, revision) => {
        // emmett counts stream versions from 1: after r appends the version is r.
        await emmett.appendToStream(stream, [{ type: 'Tick', data: { revision } }], {
          expectedStreamVersion: revision === 0 ? STREAM_DOES_NOT_EXIST : BigInt(revision),
        });
      });
    // A warm-up of each (schema creation, connections, plans), not counted.
    await emmett.appendToStream(`warmup-${randomUUID()}`, [{ type: 'Tick', data: {} }]);
    await ours.append(`warmup-${randomUUID()}`, [{ id: randomUUID(), type: 'Tick', data: {} }]);
    const results: Array<{ round: number; ours: number; emmett: number; ratio: number }> = [];
    for (let round = 1; round <= rounds; round++) {
      const o = await runOurs();
      const e = await runEmmett();
      results.push({ round, ours: o.perSecond, emmett: e.perSecond, ratio: round2(o.perSecond / e.perSecond) });
      say(`appends round ${round}: ours ${o.perSecond}/s (${o.ms} ms), emmett ${e.perSecond}/s (${e.ms} ms)`);
    }
    const ratio = median(results.map((r) => r.ratio));
    return {
      workload: `${STREAMS} streams × ${APPENDS_PER_STREAM} one-event appends, exact expected revision, ${WORKERS} workers`,
      rounds: results,
      oursPerSecond: median(results.map((r) => r.ours)),
      emmettPerSecond: median(results.map((r) => r.emmett)),
      ratio,
      goal: 'ours ÷ emmett-postgresql ≥ 5',
      met: ratio >= 5,
    };
  } finally {
    await ours.close();
    await emmett.close();
    await pool.end();
    await oursDb.drop();
    await emmettDb.drop();
  }
}

type CreateRound = {
  createsPerSecond: number;
  created: number;
  p50: number;
  p99: number;
  non2xx: number;
  errors: number;
  /** CPU ms per create: the side's own processes, PostgreSQL's, and both (see measuredRound). */
  cpuMsPerCreate?: { own: number; byProcess: number[]; postgres: number; total: number; settleMs: number };
};

/**
 * A round with its CPU cost: what the side's processes and every PostgreSQL process used from
 * its start until `settled` says its work is done (our projector caught up), per create. On a
 * VM whose speed and steal vary between rounds, CPU per create stays comparable where rates
 * swing.
 */
async function measuredRound(
  round: () => Promise<CreateRound>,
  pids: readonly number[],
  settled: () => Promise<void>,
): Promise<CreateRound> {
  const before = await cpuMillis(pids);
  const result = await round();
  const ended = performance.now();
  await settled();
  const settleMs = Math.round(performance.now() - ended);
  const after = await cpuMillis(pids);
  const per = (ms: number) => Number((ms / Math.max(result.created, 1)).toFixed(3));
  const used = after.byPid.map((ms, i) => ms - (before.byPid[i] ?? 0));
  const own = used.reduce((a, b) => a + b, 0);
  const postgres = after.postgres - before.postgres;
  const byProcess = used.map(per);
  return { ...result, cpuMsPerCreate: { own: per(own), byProcess, postgres: per(postgres), total: per(own + postgres), settleMs } };
}

async function createRound(url: string, headers: Record<string, string>, seconds: number, connections: number): Promise<CreateRound> {
  let n = 0;
  const prefix = randomUUID().slice(0, 8);
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    autocannon(
      {
        url,
        method: 'POST',
        connections,
        duration: seconds,
        headers: { ...headers, 'content-type': 'application/json' },
        requests: [
          {
            setupRequest: (request) => ({
              ...request,
              body: JSON.stringify({
                email: `w-${prefix}-${n++}@bench.example`,
                firstName: 'Write',
                lastName: 'Bench',
                department: 'sales',
              }),
            }),
          },
        ],
      },
      (error, r) => (error ? reject(error) : resolve(r)),
    );
  });
  return {
    createsPerSecond: Math.round(result['2xx'] / seconds),
    created: result['2xx'],
    p50: result.latency.p50,
    p99: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors,
  };
}

async function createsBench(rounds: number, seconds: number, connections: number, warmupSeconds: number) {
  const oursDb = await createBenchDatabase('bench_write_api');
  const crudDb = await createBenchDatabase('bench_write_crud');
  const pool = await createDatabasePool(oursDb.url, { maximumPoolSize: 4 });
  const children: ChildProcess[] = [];
  try {
    const { jwk, adminHeaders } = await createBenchAuth();
    const slug = `write-${Date.now().toString(36)}`;
    await provisionTenant(pool, { slug, plan: 'enterprise' });
    const headers = await adminHeaders(slug);

    const env = { ...process.env, ...serviceEnv(oursDb.url, jwk) };
    const nodeArgs = (process.env.BENCH_GATEWAY_NODE_ARGS ?? '').split(' ').filter(Boolean);
    const projectorArgs = (process.env.BENCH_PROJECTOR_NODE_ARGS ?? '').split(' ').filter(Boolean);
    const argsFor = (role: string | undefined) => (role === 'gateway' ? nodeArgs : role === 'projector' ? projectorArgs : []);
    const start = (script: string, port: number, extraEnv: Record<string, string>, ...args: string[]) => {
      const child = spawn(process.execPath, [...argsFor(args[0]), script, ...args], {
        env: { ...env, ...extraEnv, PORT: String(port) },
        stdio: ['ignore', 'ignore', 'inherit'],
      });
      children.push(child);
      return child;
    };
    const oursPort = await freePort();
    const gateway = start('services/main.ts', oursPort, {}, 'gateway');
    const projector = start('services/main.ts', await freePort(), {}, 'projector', 'employees');
    const crudPort = await freePort();
    const crudServer = start('bench/support/crudServer.ts', crudPort, { DATABASE_URL: crudDb.url });
    const oursPids = [gateway.pid, projector.pid].filter((pid): pid is number => pid !== undefined);
    const crudPids = [crudServer.pid].filter((pid): pid is number => pid !== undefined);
    // Our round's work ends when every projection of the projector has passed the log's last event.
    const caughtUp = async () => {
      const last = await pool.oneFirst(sql.type(z.object({ n: z.string() }))`select coalesce(max(position), 0)::text as n from es_events`);
      for (let waited = 0; waited < 60_000; waited += 100) {
        const behind = await pool.oneFirst(sql.type(z.object({ n: z.number() }))`
          select count(*)::int4 as n from projection_checkpoints where prepare_position < ${last}::numeric
        `);
        if (behind === 0) return;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    };
    await waitForHttp(`http://127.0.0.1:${oursPort}/health/ready`, 60_000);
    await waitForHttp(`http://127.0.0.1:${crudPort}/health/ready`, 60_000);
    const oursUrl = `http://127.0.0.1:${oursPort}/v1/employees`;
    const crudUrl = `http://127.0.0.1:${crudPort}/v1/employees`;
    // Warm-up, not counted, as long for each side as a round: from a cold start both sides
    // climb for several seconds before their steady rate, and a shorter warm-up left round 1
    // partly in the climb (docs/benchmarks.md, write).
    await createRound(oursUrl, headers, warmupSeconds, connections);
    await createRound(crudUrl, {}, warmupSeconds, connections);

    const results: Array<{ round: number; ours: CreateRound; crud: CreateRound; ratio: number; p99Ratio: number }> = [];
    for (let round = 1; round <= rounds; round++) {
      const ours = await measuredRound(() => createRound(oursUrl, headers, seconds, connections), oursPids, caughtUp);
      const crud = await measuredRound(
        () => createRound(crudUrl, {}, seconds, connections),
        crudPids,
        async () => {},
      );
      const ratio = round2(ours.createsPerSecond / crud.createsPerSecond);
      const p99Ratio = round2(ours.p99 / Math.max(crud.p99, 1));
      results.push({ round, ours, crud, ratio, p99Ratio });
      say(
        `creates round ${round}: ours ${ours.createsPerSecond}/s p99 ${ours.p99} ms (non2xx ${ours.non2xx}), crud ${crud.createsPerSecond}/s p99 ${crud.p99} ms; CPU ms per create ours ${JSON.stringify(ours.cpuMsPerCreate)}, crud ${JSON.stringify(crud.cpuMsPerCreate)}`,
      );
    }
    const ratio = median(results.map((r) => r.ratio));
    const p99Ratio = median(results.map((r) => r.p99Ratio));
    return {
      connections,
      secondsPerRound: seconds,
      warmupSeconds,
      rounds: results,
      oursPerSecond: median(results.map((r) => r.ours.createsPerSecond)),
      oursP99: median(results.map((r) => r.ours.p99)),
      crudPerSecond: median(results.map((r) => r.crud.createsPerSecond)),
      crudP99: median(results.map((r) => r.crud.p99)),
      ratio,
      p99Ratio,
      goal: 'ours ÷ CRUD ≥ 0.6 with p99(ours) ≤ 2 × p99(CRUD)',
      met: ratio >= 0.6 && p99Ratio <= 2,
    };
  } finally {
    for (const child of children) await stopChild(child);
    await pool.end();
    await oursDb.drop();
    await crudDb.drop();
  }
}

export async function runWriteBench() {
  const rounds = Number(process.env.BENCH_WRITE_ROUNDS ?? 3);
  const seconds = Number(process.env.BENCH_WRITE_SECONDS ?? 8);
  const connections = Number(process.env.BENCH_WRITE_CONNECTIONS ?? 32);
  const warmupSeconds = Number(process.env.BENCH_WRITE_WARMUP_SECONDS ?? seconds);
  const only = process.env.BENCH_WRITE_ONLY;
  const appends = only === 'creates' ? undefined : await appendsBench(rounds);
  if (appends) say(`appends: ours ${appends.oursPerSecond}/s vs emmett ${appends.emmettPerSecond}/s, ratio ${appends.ratio}`);
  const creates = only === 'appends' ? undefined : await createsBench(rounds, seconds, connections, warmupSeconds);
  if (creates)
    say(
      `creates: ours ${creates.oursPerSecond}/s p99 ${creates.oursP99} ms vs CRUD ${creates.crudPerSecond}/s p99 ${creates.crudP99} ms, ratio ${creates.ratio}`,
    );
  // What sealing adds to a hire in CPU alone (the creates above pay it, through the sealing boundary).
  const sealingCost = measureSealingCost();
  return { scenario: 'write', note: '2 shared cores: absolute figures are noisy, ratios less so', appends, creates, sealingCost };
}
