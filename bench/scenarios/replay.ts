/**
 * Replay of the employees projection as a bulk load, against the page-by-page
 * replay (`handle` per page, the path every projection without a `bulk` fold takes) in the same
 * run, on the same imported log:
 *
 *   npm run bench -- replay            # BENCH_REPLAY_EMPLOYEES (default 1,000,000) + 1,000
 *
 * Rounds alternate baseline / ours (BENCH_REPLAY_ROUNDS, default 1 each); each round rebuilds
 * from the first event into shadow tables and swaps. After each round the model's checksums
 * (every row and counter, in key order) are taken: every round must produce the same model,
 * so the bulk path is checked against the page-by-page one at full scale.
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { createDatabasePool, sql } from '../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../shared/event-store/postgres/eventStore.ts';
import { employeesProjection } from '../../projections/employees/employeesProjection.ts';
import { employeesModelChecksums } from '../../projections/employees/checksums.ts';
import { replayProjection } from '../../shared/projections/replay.ts';
import { createBenchDatabase } from '../support/database.ts';
import { importEmployees } from '../support/employeesImport.ts';
import { median } from '../support/measure.ts';

const say = (message: string) => process.stderr.write(`[bench replay] ${message}\n`);

export async function runReplayBench(options: { employees?: number; rounds?: number } = {}) {
  const employees = options.employees ?? Number(process.env.BENCH_REPLAY_EMPLOYEES ?? 1_000_000);
  const rounds = options.rounds ?? Number(process.env.BENCH_REPLAY_ROUNDS ?? 1);
  const database = await createBenchDatabase('bench_replay');
  const pool = await createDatabasePool(database.url, { maximumPoolSize: 10 });
  const store = createPostgresEventStore(pool);
  try {
    say(`importing 1,000 + ${employees} employees as events`);
    const imports = [
      await importEmployees(database.url, randomUUID(), 1_000),
      await importEmployees(database.url, randomUUID(), employees),
    ];
    say(`imported: ${JSON.stringify(imports)}`);
    await pool.query(sql.type(z.object({}))`vacuum analyze es_events`);

    const pageByPage = { ...employeesProjection, bulk: undefined };
    const measure = async (label: 'baseline' | 'ours') => {
      const started = performance.now();
      const result = await replayProjection(pool, store, label === 'ours' ? employeesProjection : pageByPage, { batchSize: 5_000 });
      const ms = performance.now() - started;
      const checksums = await employeesModelChecksums(pool);
      const eventsPerSecond = Math.round(result.processed / (ms / 1000));
      say(`${label}: ${result.processed} events in ${(ms / 1000).toFixed(1)} s = ${eventsPerSecond} events/s`);
      return { label, events: result.processed, ms: Math.round(ms), eventsPerSecond, checksums };
    };
    const results = [];
    for (let round = 0; round < rounds; round++) {
      // ABBA: neither side always runs on the warmer cache.
      const order: ('baseline' | 'ours')[] = round % 2 === 0 ? ['baseline', 'ours'] : ['ours', 'baseline'];
      for (const label of order) results.push(await measure(label));
    }
    const first = JSON.stringify(results[0]?.checksums);
    const sameModel = results.every((r) => JSON.stringify(r.checksums) === first);
    const ours = median(results.filter((r) => r.label === 'ours').map((r) => r.eventsPerSecond));
    const baseline = median(results.filter((r) => r.label === 'baseline').map((r) => r.eventsPerSecond));
    return {
      scenario: 'employees.replay',
      employees: employees + 1_000,
      imports,
      rounds: results.map(({ checksums: _, ...r }) => r),
      checksums: results[0]?.checksums,
      sameModel,
      oursEventsPerSecond: ours,
      baselineEventsPerSecond: baseline,
      ratio: Number((ours / baseline).toFixed(2)),
      goal: '≥ 50,000 events/s, rebuilt model equal to the page-by-page one',
      met: ours >= 50_000 && sameModel,
    };
  } finally {
    await store.close();
    await pool.end();
    if (process.env.BENCH_KEEP_DB !== '1') await database.drop();
  }
}
