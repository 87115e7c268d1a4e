/**
 * `npm run bench [-- <scenario> ...]`: runs the named scenarios (all by default), each measuring
 * ours and a baseline in the same run, and writes bench/results/<scenario>.json. Never part of
 * `npm test`. Scenarios need the real engines (PostgreSQL, Redis, Kafka) the tests use.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { authBench } from './scenarios/auth.ts';
import { runBillingBench } from './scenarios/billing.ts';
import { runEmployeesBench } from './scenarios/employees.ts';
import { healthScenario } from './scenarios/health.ts';
import { runKpiBench } from './scenarios/kpi.ts';
import { runProjectionLagBench } from './scenarios/projectionLag.ts';
import { runReadYourWritesBench } from './scenarios/readYourWrites.ts';
import { runLoginAbuseBench } from './scenarios/loginAbuse.ts';
import { runRateLimitBench } from './scenarios/rateLimit.ts';
import { runFeedBench } from './scenarios/feed.ts';
import { runRuntimeBench } from './scenarios/runtime.ts';
import { runWriteBench } from './scenarios/write.ts';
import { runReplayBench } from './scenarios/replay.ts';
import { runEmployeesListBench, runListScaleBench } from './scenarios/employeesList.ts';
import { runInputLimitsBench } from './scenarios/inputLimits.ts';

const scenarios: Record<string, () => Promise<unknown>> = {
  health: () => healthScenario(),
  auth: () => authBench(),
  'rate-limit': () => runRateLimitBench(),
  employees: () => runEmployeesBench(),
  kpi: () => runKpiBench(),
  feed: () => runFeedBench(),
  runtime: () => runRuntimeBench(),
  lag: () => runProjectionLagBench(),
  ryw: () => runReadYourWritesBench(),
  write: () => runWriteBench(),
  billing: () => runBillingBench(),
  replay: () => runReplayBench(),
  'employees-list': () => runEmployeesListBench(),
  'employees-list-scale': () => runListScaleBench(),
  'login-abuse': () => runLoginAbuseBench(),
  'input-limits': () => runInputLimitsBench(),
};

const requested = process.argv.slice(2).filter((a) => !a.startsWith('-'));
const unknown = requested.filter((name) => !(name in scenarios));
if (unknown.length > 0) {
  process.stderr.write(`unknown scenario(s): ${unknown.join(', ')}; known: ${Object.keys(scenarios).join(', ')}\n`);
  process.exit(2);
}
const names = requested.length > 0 ? requested : Object.keys(scenarios);
const outDir = resolve(import.meta.dirname, 'results');
await mkdir(outDir, { recursive: true });
for (const name of names) {
  const run = scenarios[name];
  if (!run) continue;
  process.stderr.write(`[bench] ${name} ...\n`);
  const started = Date.now();
  const result = await run();
  const record = { scenario: name, at: new Date().toISOString(), seconds: Math.round((Date.now() - started) / 1000), result };
  await writeFile(resolve(outDir, `${name}.json`), `${JSON.stringify(record, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v), 2)}\n`);
  process.stdout.write(`${JSON.stringify(record)}\n`);
}
process.exit(0);
