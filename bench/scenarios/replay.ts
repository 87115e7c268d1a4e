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
 *
 * The log is sealed, as the service writes it, and both replays read it through the sealing
 * boundary. The cost of sealing: the same employees are also imported in the clear into a
 * second database, and each round adds a bulk replay of that log without the boundary
 * (`clear`, the replay as it was before sealing); `sealedOverClear` is ours ÷ clear and
 * `sealingMicrosPerEvent` the difference per event (BENCH_REPLAY_CLEAR=0 skips it). The CPU
 * cost of sealing and opening alone, without any engine, is `sealingCost`.
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { createDatabasePool, sql } from '../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../shared/event-store/postgres/eventStore.ts';
import { employeesProjection } from '../../projections/employees/employeesProjection.ts';
import { employeesModelChecksums } from '../../projections/employees/checksums.ts';
import { replayProjection } from '../../shared/projections/replay.ts';
import { createBenchDatabase } from '../support/database.ts';
import { benchEventStore, importEmployees } from '../support/employeesImport.ts';
import { median } from '../support/measure.ts';
import { measureSealingCost } from '../support/sealingCost.ts';
import type { EventStore } from '../../shared/event-store/port.ts';
import type { DatabasePool } from '../../shared/db/pool.ts';

const say = (message: string) => process.stderr.write(`[bench replay] ${message}\n`);

export async function runReplayBench(options: { employees?: number; rounds?: number } = {}) {
  const employees = options.employees ?? Number(process.env.BENCH_REPLAY_EMPLOYEES ?? 1_000_000);
  const rounds = options.rounds ?? Number(process.env.BENCH_REPLAY_ROUNDS ?? 1);
  const withClear = process.env.BENCH_REPLAY_CLEAR !== '0';
  const database = await createBenchDatabase('bench_replay');
  const pool = await createDatabasePool(database.url, { maximumPoolSize: 10 });
  const store = benchEventStore(pool);
  const clearDatabase = withClear ? await createBenchDatabase('bench_replay_clear') : undefined;
  const clearPool = clearDatabase ? await createDatabasePool(clearDatabase.url, { maximumPoolSize: 10 }) : undefined;
  const clearStore = clearPool ? createPostgresEventStore(clearPool) : undefined;
  try {
    say(`importing 1,000 + ${employees} employees as events, sealed${clearDatabase ? ', and again in the clear' : ''}`);
    const [small, large] = [randomUUID(), randomUUID()];
    const imports = [await importEmployees(database.url, small, 1_000), await importEmployees(database.url, large, employees)];
    if (clearDatabase) {
      imports.push(await importEmployees(clearDatabase.url, small, 1_000, { sealed: false }));
      imports.push(await importEmployees(clearDatabase.url, large, employees, { sealed: false }));
    }
    say(`imported: ${JSON.stringify(imports)}`);
    await pool.query(sql.type(z.object({}))`vacuum analyze es_events`);
    await pool.query(sql.type(z.object({}))`vacuum analyze personal_data_keys`);
    if (clearPool) await clearPool.query(sql.type(z.object({}))`vacuum analyze es_events`);

    const pageByPage = { ...employeesProjection, bulk: undefined };
    type Label = 'baseline' | 'ours' | 'clear';
    const measure = async (label: Label) => {
      const [on, from]: [DatabasePool, EventStore] = label === 'clear' && clearPool && clearStore ? [clearPool, clearStore] : [pool, store];
      const started = performance.now();
      const result = await replayProjection(on, from, label === 'baseline' ? pageByPage : employeesProjection, { batchSize: 5_000 });
      const ms = performance.now() - started;
      const checksums = await employeesModelChecksums(on);
      const eventsPerSecond = Math.round(result.processed / (ms / 1000));
      say(`${label}: ${result.processed} events in ${(ms / 1000).toFixed(1)} s = ${eventsPerSecond} events/s`);
      return { label, events: result.processed, ms: Math.round(ms), eventsPerSecond, checksums };
    };
    const results = [];
    for (let round = 0; round < rounds; round++) {
      // ABBA: neither side always runs on the warmer cache.
      const order: Label[] = round % 2 === 0 ? ['baseline', 'ours', 'clear'] : ['clear', 'ours', 'baseline'];
      for (const label of order) if (label !== 'clear' || clearStore) results.push(await measure(label));
    }
    const sealedRounds = results.filter((r) => r.label !== 'clear');
    const first = JSON.stringify(sealedRounds[0]?.checksums);
    const sameModel = sealedRounds.every((r) => JSON.stringify(r.checksums) === first);
    const ours = median(results.filter((r) => r.label === 'ours').map((r) => r.eventsPerSecond));
    const baseline = median(results.filter((r) => r.label === 'baseline').map((r) => r.eventsPerSecond));
    const clear = clearStore ? median(results.filter((r) => r.label === 'clear').map((r) => r.eventsPerSecond)) : undefined;
    const sealing = clear
      ? {
          clearEventsPerSecond: clear,
          sealedOverClear: Number((ours / clear).toFixed(3)),
          sealingMicrosPerEvent: Number((1e6 / ours - 1e6 / clear).toFixed(2)),
          sealingGoal: 'sealed replay ≥ 0.9 × the clear one',
          sealingMet: ours >= 0.9 * clear,
        }
      : {};
    const sealingCost = measureSealingCost();
    say(`sealing: ${JSON.stringify({ ...sealing, cpu: sealingCost.microsPerEvent })}`);
    return {
      scenario: 'employees.replay',
      employees: employees + 1_000,
      imports,
      rounds: results.map(({ checksums: _, ...r }) => r),
      checksums: sealedRounds[0]?.checksums,
      sameModel,
      oursEventsPerSecond: ours,
      baselineEventsPerSecond: baseline,
      ratio: Number((ours / baseline).toFixed(2)),
      ...sealing,
      sealingCost,
      goal: '≥ 50,000 events/s, rebuilt model equal to the page-by-page one',
      met: ours >= 50_000 && sameModel,
    };
  } finally {
    await store.close();
    await pool.end();
    await clearStore?.close();
    await clearPool?.end();
    if (process.env.BENCH_KEEP_DB !== '1') {
      await database.drop();
      await clearDatabase?.drop();
    }
  }
}
