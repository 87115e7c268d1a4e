import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import pg from 'pg';
import { allMigrations } from '../../services/migrations.ts';
import { loadMigrations, migrate } from '../../shared/db/migrate.ts';
import { providePostgres, provideKafka, provideRedis, type EngineContext } from '../../scripts/engines.ts';

/**
 * Provisions the real engines the suite runs against (scripts/engines.ts says in which order);
 * one that cannot be provided stops the run at once, naming it and how to provide it.
 * Test files get a fresh database cloned from a migrated template (see database.ts).
 */
const cleanups: Array<() => Promise<void>> = [];

const say = (message: string) => process.stdout.write(`[test setup] ${message}\n`);
const engines: EngineContext = { say, cleanups };
/**
 * Debian's chromium for the dashboard's browser test (no browser download): CHROMIUM_PATH, else
 * /usr/bin/chromium, else installed with apt-get when we may (root on a Debian-like machine), as
 * the test command provisions Kafka. Otherwise the browser test fails naming what is missing.
 */
function provideChromium(): void {
  const path = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
  if (existsSync(path) || process.env.CHROMIUM_PATH) return;
  if (process.getuid?.() !== 0 || !existsSync('/usr/bin/apt-get')) {
    say(`no chromium at ${path}; the dashboard browser test needs Debian's chromium (apt-get install -y chromium) or CHROMIUM_PATH`);
    return;
  }
  say('installing Debian chromium for the dashboard browser test (apt-get)');
  try {
    execFileSync('apt-get', ['update', '-qq'], { stdio: 'ignore', timeout: 300_000 });
    execFileSync('apt-get', ['install', '-y', '-qq', 'chromium'], {
      stdio: 'ignore',
      timeout: 600_000,
      env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    });
  } catch (error) {
    say(`chromium could not be installed (${(error as Error).message.split('\n')[0]}); the dashboard browser test will fail`);
  }
}

/** A template database with every migration applied; test files clone it (fast, isolated). */
async function prepareTemplate(adminUrl: string): Promise<string> {
  const digest = createHash('sha256')
    .update(JSON.stringify(loadMigrations(allMigrations).map(({ id, sha256 }) => [id, sha256])))
    .digest('hex')
    .slice(0, 12);
  const template = `eas_tpl_${digest}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query('select pg_advisory_lock(7412020)');
    const exists = await admin.query('select 1 from pg_database where datname = $1', [template]);
    if (exists.rowCount === 0) {
      await admin.query(`create database ${template}_building`).catch(async () => {
        await admin.query(`drop database if exists ${template}_building with (force)`);
        await admin.query(`create database ${template}_building`);
      });
      const url = new URL(adminUrl);
      url.pathname = `/${template}_building`;
      await migrate(url.toString(), allMigrations);
      await admin.query(`alter database ${template}_building rename to ${template}`);
    }
    await admin.query('select pg_advisory_unlock(7412020)');
  } finally {
    await admin.end();
  }
  return template;
}

export default async function setup(): Promise<() => Promise<void>> {
  const started = Date.now();
  provideChromium();
  const [postgresUrl, redisUrl, kafkaBrokers] = await Promise.all([
    providePostgres(engines, { dataDir: resolve('.tmp/test-pg'), port: 54339 }),
    provideRedis(engines),
    provideKafka(engines),
  ]);
  const template = await prepareTemplate(postgresUrl);
  const runId = `${Date.now().toString(36)}${process.pid.toString(36)}`;
  Object.assign(process.env, {
    TEST_PG_ADMIN_URL: postgresUrl,
    TEST_PG_TEMPLATE: template,
    TEST_RUN_ID: runId,
    REDIS_URL: redisUrl,
    KAFKA_BROKERS: kafkaBrokers,
  });
  say(
    `PostgreSQL ${new URL(postgresUrl).host} (template ${template}), Redis ${new URL(redisUrl).host}, Kafka ${kafkaBrokers} — ready in ${Date.now() - started} ms`,
  );

  return async () => {
    const admin = new pg.Client({ connectionString: postgresUrl });
    await admin.connect();
    const { rows } = await admin.query<{ datname: string }>('select datname from pg_database where datname like $1', [`t_${runId}_%`]);
    for (const { datname } of rows) await admin.query(`drop database if exists "${datname}" with (force)`).catch(() => undefined);
    await admin.end();
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  };
}
