import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import pg from 'pg';
import { Redis } from 'ioredis';
import { allMigrations } from '../../services/migrations.ts';
import { loadMigrations, migrate } from '../../shared/db/migrate.ts';
import { startEmbeddedPostgres } from '../../shared/db/embedded.ts';
import { ensureKafka } from './kafkaBroker.ts';

/**
 * Provisions the real engines the suite runs against, in this order of preference:
 *   PostgreSQL: DATABASE_URL, else 127.0.0.1:5432, else an embedded PostgreSQL, else (Docker) testcontainers.
 *   Redis:      REDIS_URL,    else 127.0.0.1:6379, else (Docker) testcontainers.
 *   Kafka:      KAFKA_BROKERS, else the Maven-resolved broker (scripts/kafka.sh), else (Docker) testcontainers.
 * A service that cannot be provided stops the run at once, naming it and how to provide it.
 * Test files get a fresh database cloned from a migrated template (see database.ts).
 */
const cleanups: Array<() => Promise<void>> = [];

const say = (message: string) => process.stdout.write(`[test setup] ${message}\n`);
const hasDocker = () => Boolean(process.env.DOCKER_HOST) || existsSync('/var/run/docker.sock');

async function canConnectPostgres(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  try {
    await client.connect();
    await client.query('select 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function canPingRedis(url: string): Promise<boolean> {
  const redis = new Redis(url, { lazyConnect: true, connectTimeout: 2_000, maxRetriesPerRequest: 0, retryStrategy: () => null });
  try {
    await redis.connect();
    return (await redis.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    redis.disconnect();
  }
}

async function providePostgres(): Promise<string> {
  if (process.env.DATABASE_URL) {
    if (await canConnectPostgres(process.env.DATABASE_URL)) return process.env.DATABASE_URL;
    throw new Error(`PostgreSQL: DATABASE_URL is set but does not answer (${process.env.DATABASE_URL}).`);
  }
  const local = 'postgres://postgres@127.0.0.1:5432/postgres';
  if (await canConnectPostgres(local)) return local;
  say('no PostgreSQL on 127.0.0.1:5432; starting an embedded one');
  try {
    const embedded = await startEmbeddedPostgres({ dataDir: resolve('.tmp/test-pg'), port: 54339 });
    cleanups.push(() => embedded.stop());
    return embedded.url;
  } catch (error) {
    if (!hasDocker()) {
      throw new Error(`PostgreSQL: none reachable and the embedded one failed (${(error as Error).message}). Set DATABASE_URL.`, { cause: error });
    }
  }
  const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
  const container = await new PostgreSqlContainer('postgres:17-alpine').start();
  cleanups.push(async () => void (await container.stop()));
  return container.getConnectionUri();
}

async function provideRedis(): Promise<string> {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  if (await canPingRedis(url)) return url;
  if (process.env.REDIS_URL || !hasDocker()) {
    throw new Error(`Redis: nothing answers at ${url}. Start redis-server on 127.0.0.1:6379 or set REDIS_URL.`);
  }
  say('no Redis on 127.0.0.1:6379; starting one with testcontainers');
  const { RedisContainer } = await import('@testcontainers/redis');
  const container = await new RedisContainer('redis:7-alpine').start();
  cleanups.push(async () => void (await container.stop()));
  return container.getConnectionUrl();
}

async function provideKafka(): Promise<string> {
  if (process.env.KAFKA_BROKERS) return process.env.KAFKA_BROKERS;
  try {
    return await ensureKafka();
  } catch (error) {
    if (!hasDocker()) {
      throw new Error(`Kafka: set KAFKA_BROKERS, or install Java 17+ and Maven so scripts/kafka.sh can run a broker (${(error as Error).message}).`, {
        cause: error,
      });
    }
  }
  say('starting Kafka with testcontainers');
  const { KafkaContainer } = await import('@testcontainers/kafka');
  const container = await new KafkaContainer('confluentinc/cp-kafka:7.9.0').withKraft().start();
  cleanups.push(async () => void (await container.stop()));
  return `${container.getHost()}:${container.getMappedPort(9093)}`;
}

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
    execFileSync('apt-get', ['install', '-y', '-qq', 'chromium'], { stdio: 'ignore', timeout: 600_000, env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
  } catch (error) {
    say(`chromium could not be installed (${(error as Error).message.split('\n')[0]}); the dashboard browser test will fail`);
  }
}

/** A template database with every migration applied; test files clone it (fast, isolated). */
async function prepareTemplate(adminUrl: string): Promise<string> {
  const digest = createHash('sha256').update(JSON.stringify(loadMigrations(allMigrations).map(({ id, sha256 }) => [id, sha256]))).digest('hex').slice(0, 12);
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
  const [postgresUrl, redisUrl, kafkaBrokers] = await Promise.all([providePostgres(), provideRedis(), provideKafka()]);
  const template = await prepareTemplate(postgresUrl);
  const runId = `${Date.now().toString(36)}${process.pid.toString(36)}`;
  Object.assign(process.env, {
    TEST_PG_ADMIN_URL: postgresUrl,
    TEST_PG_TEMPLATE: template,
    TEST_RUN_ID: runId,
    REDIS_URL: redisUrl,
    KAFKA_BROKERS: kafkaBrokers,
  });
  say(`PostgreSQL ${new URL(postgresUrl).host} (template ${template}), Redis ${new URL(redisUrl).host}, Kafka ${kafkaBrokers} — ready in ${Date.now() - started} ms`);

  return async () => {
    const admin = new pg.Client({ connectionString: postgresUrl });
    await admin.connect();
    const { rows } = await admin.query<{ datname: string }>('select datname from pg_database where datname like $1', [`t_${runId}_%`]);
    for (const { datname } of rows) await admin.query(`drop database if exists "${datname}" with (force)`).catch(() => undefined);
    await admin.end();
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  };
}
