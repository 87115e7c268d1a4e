import { existsSync } from 'node:fs';
import { createConnection } from 'node:net';
import pg from 'pg';
import { Redis } from 'ioredis';
import { startEmbeddedPostgres } from '../shared/db/embedded.ts';
import { ensureKafka } from './kafkaBroker.ts';

/**
 * The real engines `npm test` and `npm run bench` run against, each provided in this order:
 *   PostgreSQL: DATABASE_URL, else 127.0.0.1:5432, else an embedded PostgreSQL, else (Docker) testcontainers.
 *   Redis:      REDIS_URL,    else 127.0.0.1:6379, else (Docker) testcontainers.
 *   Kafka:      KAFKA_BROKERS, else the Maven-resolved broker (scripts/kafka.sh), else (Docker) testcontainers.
 * A URL given in the environment must answer: a wrong one is a mistake to report, not a reason to
 * start something else. An engine that cannot be had throws one line that names it and says how
 * to provide it, so the caller can stop with that line instead of a client library's stack trace.
 * Whatever is started here registers its stop in `cleanups`, even when a sibling engine fails.
 */
export type Engine = 'postgres' | 'redis' | 'kafka';

export type EngineContext = {
  readonly say: (message: string) => void;
  readonly cleanups: Array<() => Promise<void>>;
};

const hasDocker = () => Boolean(process.env.DOCKER_HOST) || existsSync('/var/run/docker.sock');
const firstLine = (error: unknown) => (error instanceof Error ? error.message : String(error)).split('\n')[0];

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
  redis.on('error', () => undefined); // the failed connect rejects below; without a listener ioredis also prints it
  try {
    await redis.connect();
    return (await redis.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    redis.disconnect();
  }
}

/** A TCP connection to `host:port` within 2 s: enough to tell a listening broker from none. */
function canOpen(address: string): Promise<boolean> {
  const at = address.lastIndexOf(':');
  const host = at > 0 ? address.slice(0, at).replace(/^\[|\]$/g, '') : address;
  const port = Number(at > 0 ? address.slice(at + 1) : 9092);
  if (!Number.isInteger(port) || port <= 0 || port > 65_535) return Promise.resolve(false);
  return new Promise((resolve) => {
    const socket = createConnection({ host, port, timeout: 2_000 });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.once('connect', () => done(true));
    socket.once('timeout', () => done(false));
    socket.once('error', () => done(false));
  });
}

export async function providePostgres(
  context: EngineContext,
  embedded: { readonly dataDir: string; readonly port: number },
): Promise<string> {
  const given = process.env.DATABASE_URL;
  if (given) {
    if (await canConnectPostgres(given)) return given;
    throw new Error(`PostgreSQL: DATABASE_URL is set but does not answer (${given}).`);
  }
  const local = 'postgres://postgres@127.0.0.1:5432/postgres';
  if (await canConnectPostgres(local)) return local;
  context.say('no PostgreSQL on 127.0.0.1:5432; starting an embedded one');
  try {
    const server = await startEmbeddedPostgres(embedded);
    context.cleanups.push(() => server.stop());
    return server.url;
  } catch (error) {
    if (!hasDocker()) {
      throw new Error(`PostgreSQL: none reachable and the embedded one failed (${firstLine(error)}). Set DATABASE_URL.`, { cause: error });
    }
  }
  const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
  const container = await new PostgreSqlContainer('postgres:17-alpine').start();
  context.cleanups.push(async () => void (await container.stop()));
  return container.getConnectionUri();
}

export async function provideRedis(context: EngineContext): Promise<string> {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  if (await canPingRedis(url)) return url;
  if (process.env.REDIS_URL || !hasDocker()) {
    throw new Error(`Redis: nothing answers at ${url}. Start redis-server on 127.0.0.1:6379 or set REDIS_URL.`);
  }
  context.say('no Redis on 127.0.0.1:6379; starting one with testcontainers');
  const { RedisContainer } = await import('@testcontainers/redis');
  const container = await new RedisContainer('redis:7-alpine').start();
  context.cleanups.push(async () => void (await container.stop()));
  return container.getConnectionUrl();
}

export async function provideKafka(context: EngineContext): Promise<string> {
  const given = process.env.KAFKA_BROKERS;
  if (given) {
    const answers = await Promise.all(given.split(',').map((broker) => canOpen(broker.trim())));
    if (answers.some(Boolean)) return given;
    throw new Error(
      `Kafka: KAFKA_BROKERS is set but no broker answers at ${given}. Start one (npm run kafka -- start) or fix KAFKA_BROKERS.`,
    );
  }
  try {
    return await ensureKafka();
  } catch (error) {
    if (!hasDocker()) {
      throw new Error(
        `Kafka: set KAFKA_BROKERS, or install Java 17+ and Maven so scripts/kafka.sh can run a broker (${firstLine(error)}).`,
        { cause: error },
      );
    }
  }
  context.say('starting Kafka with testcontainers');
  const { KafkaContainer } = await import('@testcontainers/kafka');
  const container = await new KafkaContainer('confluentinc/cp-kafka:7.9.0').withKraft().start();
  context.cleanups.push(async () => void (await container.stop()));
  return `${container.getHost()}:${container.getMappedPort(9093)}`;
}
