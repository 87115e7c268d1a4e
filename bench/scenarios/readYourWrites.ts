/**
 * Read-your-writes waiters (`npm run bench -- ryw`): what it costs to hold N requests that wait
 * for a projection checkpoint, and how soon they wake once the checkpoint commits.
 *
 * Baseline (same run, alternating rounds): the previous `waitForCheckpoint`, each waiter reading
 * the checkpoint table every 10 ms. Ours: one LISTEN connection per process, woken by the
 * checkpoint trigger's NOTIFY, one read per waiter.
 *
 * Each round: N waiters (default 100) start on a position ahead of the checkpoint; after 300 ms
 * another connection moves the checkpoint there. Measured: wake-up latency (from just before that
 * UPDATE is sent to each waiter's resolution; includes the UPDATE's own round trip on both sides)
 * and statements the waiters' pool ran per waiter.
 */
import { createPool, type Interceptor } from 'slonik';
import { z } from 'zod';
import { sql, type DatabasePool } from '../../shared/db/pool.ts';
import { comparePositions, type GlobalPosition } from '../../shared/event-store/port.ts';
import { readCheckpoint } from '../../shared/projections/checkpoints.ts';
import { waitForCheckpoint } from '../../shared/projections/readYourWrites.ts';
import { createBenchDatabase } from '../support/database.ts';
import { median, percentile } from '../support/measure.ts';

const say = (message: string) => process.stderr.write(`[bench ryw] ${message}\n`);

/** The implementation this replaced: poll the checkpoint row every `pollMs` per waiting request. */
async function pollingWaitForCheckpoint(
  pool: DatabasePool,
  name: string,
  position: GlobalPosition,
  timeoutMs: number,
  pollMs = 10,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const checkpoint = await readCheckpoint(pool, name);
    if (checkpoint && comparePositions(checkpoint.position, position) >= 0) return true;
    if (Date.now() >= deadline) return false;
    await new Promise((r) => setTimeout(r, Math.min(pollMs, Math.max(0, deadline - Date.now()))));
  }
}

export async function runReadYourWritesBench() {
  const waiters = Number(process.env.BENCH_RYW_WAITERS ?? 100);
  const rounds = Number(process.env.BENCH_RYW_ROUNDS ?? 5);
  const database = await createBenchDatabase('bench_ryw');
  let statements = 0;
  const counter: Interceptor = {
    name: 'count-statements',
    beforeQueryExecution: async () => {
      statements++;
      return null;
    },
  };
  const waiting = await createPool(database.url, { maximumPoolSize: 10, interceptors: [counter], resetConnection: async () => undefined });
  const writer = await createPool(database.url, { maximumPoolSize: 1 });
  const name = 'bench_ryw';
  try {
    await writer.query(sql.type(z.object({}))`
      insert into projection_checkpoints (name, version, commit_position, prepare_position) values (${name}, 1, 1, 0)
    `);
    const sides = {
      'baseline (poll every 10 ms)': (position: GlobalPosition) => pollingWaitForCheckpoint(waiting, name, position, 5_000),
      'ours (LISTEN/NOTIFY)': (position: GlobalPosition) => waitForCheckpoint(waiting, name, position, 5_000),
    };
    const results: Record<string, Array<{ p50: number; p95: number; max: number; statementsPerWaiter: number; reached: number }>> = {};
    let next = 2n;
    for (let round = 0; round < rounds; round++) {
      for (const [side, wait] of Object.entries(sides)) {
        const target = { commit: next++, prepare: 0n };
        const before = statements;
        const woke: number[] = [];
        const all = Array.from({ length: waiters }, () => wait(target).then((reached) => (woke.push(performance.now()), reached)));
        await new Promise((r) => setTimeout(r, 300));
        const moved = performance.now();
        await writer.query(sql.type(z.object({}))`
          update projection_checkpoints set commit_position = ${target.commit.toString()}, prepare_position = 0 where name = ${name}
        `);
        const reached = (await Promise.all(all)).filter(Boolean).length;
        const latencies = woke.map((t) => t - moved).sort((a, b) => a - b);
        const entry = {
          p50: Number(percentile(latencies, 50).toFixed(1)),
          p95: Number(percentile(latencies, 95).toFixed(1)),
          max: Number((latencies.at(-1) ?? Number.NaN).toFixed(1)),
          statementsPerWaiter: Number(((statements - before) / waiters).toFixed(1)),
          reached,
        };
        (results[side] ??= []).push(entry);
        say(`round ${round + 1} ${side}: ${JSON.stringify(entry)}`);
      }
    }
    const summary = Object.fromEntries(
      Object.entries(results).map(([side, runs]) => [
        side,
        {
          p50: median(runs.map((r) => r.p50)),
          p95: median(runs.map((r) => r.p95)),
          statementsPerWaiter: median(runs.map((r) => r.statementsPerWaiter)),
          reached: runs.reduce((n, r) => n + r.reached, 0),
          rounds: runs,
        },
      ]),
    );
    return { scenario: 'projections.readYourWrites', waiters, rounds, waitBeforeCommitMs: 300, sides: summary };
  } finally {
    await waiting.end();
    await writer.end();
    await database.drop();
  }
}
