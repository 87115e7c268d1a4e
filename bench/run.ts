/**
 * `npm run bench [-- <scenario> ...]`: runs the named scenarios (all by default), each measuring
 * ours and a baseline in the same run, and writes bench/results/<scenario>.json. Never part of
 * `npm test`. Before the first scenario it provides the engines the chosen scenarios need, as
 * `npm test` does (scripts/engines.ts), and sets DATABASE_URL, REDIS_URL and KAFKA_BROKERS for
 * them; an engine that cannot be had stops the bench with one line saying how to provide it.
 * Scenarios are imported only after that, because some read those variables at import.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { provideKafka, providePostgres, provideRedis, type Engine, type EngineContext } from '../scripts/engines.ts';

type Scenario = { readonly needs: readonly Engine[]; readonly run: () => Promise<unknown> };

const scenarios: Record<string, Scenario> = {
  health: { needs: [], run: async () => (await import('./scenarios/health.ts')).healthScenario() },
  auth: { needs: ['postgres'], run: async () => (await import('./scenarios/auth.ts')).authBench() },
  'rate-limit': { needs: ['postgres', 'redis'], run: async () => (await import('./scenarios/rateLimit.ts')).runRateLimitBench() },
  employees: { needs: ['postgres'], run: async () => (await import('./scenarios/employees.ts')).runEmployeesBench() },
  kpi: { needs: ['postgres', 'kafka'], run: async () => (await import('./scenarios/kpi.ts')).runKpiBench() },
  feed: { needs: ['postgres', 'redis'], run: async () => (await import('./scenarios/feed.ts')).runFeedBench() },
  // The process under test starts its own embedded PostgreSQL, as `npm start` does.
  runtime: { needs: [], run: async () => (await import('./scenarios/runtime.ts')).runRuntimeBench() },
  lag: { needs: ['postgres'], run: async () => (await import('./scenarios/projectionLag.ts')).runProjectionLagBench() },
  ryw: { needs: ['postgres'], run: async () => (await import('./scenarios/readYourWrites.ts')).runReadYourWritesBench() },
  write: { needs: ['postgres'], run: async () => (await import('./scenarios/write.ts')).runWriteBench() },
  billing: { needs: ['postgres', 'kafka'], run: async () => (await import('./scenarios/billing.ts')).runBillingBench() },
  replay: { needs: ['postgres'], run: async () => (await import('./scenarios/replay.ts')).runReplayBench() },
  'employees-list': { needs: ['postgres'], run: async () => (await import('./scenarios/employeesList.ts')).runEmployeesListBench() },
  'employees-list-scale': { needs: ['postgres'], run: async () => (await import('./scenarios/employeesList.ts')).runListScaleBench() },
  'login-abuse': { needs: ['postgres'], run: async () => (await import('./scenarios/loginAbuse.ts')).runLoginAbuseBench() },
  workforce: { needs: ['postgres'], run: async () => (await import('./scenarios/workforce.ts')).runWorkforceBench() },
  'input-limits': { needs: [], run: async () => (await import('./scenarios/inputLimits.ts')).runInputLimitsBench() },
};

const say = (message: string) => process.stderr.write(`[bench] ${message}\n`);

async function provideEngines(needed: ReadonlySet<Engine>, context: EngineContext): Promise<void> {
  const [databaseUrl, redisUrl, kafkaBrokers] = await Promise.all([
    needed.has('postgres') ? providePostgres(context, { dataDir: resolve('.tmp/bench-pg'), port: 54341 }) : undefined,
    needed.has('redis') ? provideRedis(context) : undefined,
    needed.has('kafka') ? provideKafka(context) : undefined,
  ]);
  if (databaseUrl) process.env.DATABASE_URL = databaseUrl;
  if (redisUrl) process.env.REDIS_URL = redisUrl;
  if (kafkaBrokers) process.env.KAFKA_BROKERS = kafkaBrokers;
}

async function stopAll(cleanups: Array<() => Promise<void>>): Promise<void> {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
}

const requested = process.argv.slice(2).filter((a) => !a.startsWith('-'));
const unknown = requested.filter((name) => !(name in scenarios));
if (unknown.length > 0) {
  process.stderr.write(`unknown scenario(s): ${unknown.join(', ')}; known: ${Object.keys(scenarios).join(', ')}\n`);
  process.exit(2);
}
const names = requested.length > 0 ? requested : Object.keys(scenarios);
const cleanups: Array<() => Promise<void>> = [];
try {
  await provideEngines(new Set(names.flatMap((name) => scenarios[name]?.needs ?? [])), { say, cleanups });
} catch (error) {
  say(`cannot run ${names.join(', ')}: ${(error instanceof Error ? error.message : String(error)).split('\n')[0]}`);
  await stopAll(cleanups);
  process.exit(1);
}
const outDir = resolve(import.meta.dirname, 'results');
await mkdir(outDir, { recursive: true });
for (const name of names) {
  const scenario = scenarios[name];
  if (!scenario) continue;
  say(`${name} ...`);
  const started = Date.now();
  const result = await scenario.run();
  const record = { scenario: name, at: new Date().toISOString(), seconds: Math.round((Date.now() - started) / 1000), result };
  await writeFile(
    resolve(outDir, `${name}.json`),
    `${JSON.stringify(record, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v), 2)}\n`,
  );
  process.stdout.write(`${JSON.stringify(record)}\n`);
}
await stopAll(cleanups);
process.exit(0);
