import { collectDefaultMetrics, Registry } from 'prom-client';
import type { Config } from '../shared/config.ts';
import { migrate } from '../shared/db/migrate.ts';
import { createDatabasePool, sql, type DatabasePool } from '../shared/db/pool.ts';
import { createTenantReader, type TenantReader } from '../shared/db/tenantReader.ts';
import { z } from 'zod';
import { startEmbeddedPostgres, type EmbeddedDatabase } from '../shared/db/embedded.ts';
import { createPostgresEventStore } from '../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../shared/event-store/port.ts';
import type { Logger } from '../shared/logger.ts';
import { createConfiguredRateLimiter } from '../shared/rate-limit/configured.ts';
import type { RateLimiter } from '../shared/rate-limit/limiter.ts';
import { createConfiguredUsageBus, type UsageBus } from '../shared/metrics-bus/configured.ts';
import { DEFAULT_KPI_GROUP } from '../projections/kpi/consumer.ts';
import type { ReadinessCheck } from './gateway/health.ts';
import { activeTracing, traceEventStore } from '../shared/telemetry/tracing.ts';
import { allMigrations } from './migrations.ts';
import { parkedEventsReadiness, registerParkedEventsMetric } from '../shared/projections/monitoring.ts';
import pg from 'pg';
import { createDataKeyStore, type DataKeyStore } from '../shared/personal-data/dataKeys.ts';
import { loadKeyEncryptionKeys } from '../shared/personal-data/keyEncryptionKeys.ts';
import { startBulkOpener } from '../shared/personal-data/bulkOpener.ts';
import { loadEmailHash, type EmailHash } from '../shared/personal-data/emailHash.ts';
import { createSealingEventStore } from '../shared/event-store/sealing.ts';
import { employeePersonalData } from './employees/contract.ts';

/**
 * The embedded server another process of ours already runs (the service, while an ops command
 * or a second role attaches to it). Its owner stops it; we only connect.
 */
async function runningEmbeddedPostgres(config: Config): Promise<string | undefined> {
  const url = `postgres://postgres:postgres@127.0.0.1:${config.EMBEDDED_PG_PORT}/postgres`;
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1_000 });
  try {
    await client.connect();
    return url;
  } catch {
    return undefined;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * The ports of one process, built from configuration: each URL that is set switches its part
 * to the real engine; without it the embedded default is used. Domain code sees only ports.
 */
export type Runtime = {
  readonly config: Config;
  readonly databaseUrl: string;
  readonly pool: DatabasePool;
  /** Transaction-free tenant-scoped reads (hot list pages), on connections that are the tenant role. */
  readonly tenantReader: TenantReader;
  /** The event log behind the sealing boundary: personal fields are stored sealed, read plain. */
  readonly eventStore: EventStore;
  /**
   * The same log without the sealing boundary: for scans that need only stream ids and what is
   * not personal, and must not stop on a field nothing can open (services/employees/erasureRuns.ts).
   */
  readonly logStore: EventStore;
  /** Whether the log is in `pool`'s database (PostgreSQL), so one transaction spans log and tables; false on KurrentDB. */
  readonly logInDatabase: boolean;
  /** The per-employee data keys (erasure destroys one). */
  readonly dataKeys: DataKeyStore;
  /** The keyed hash e-mail uniqueness is kept on. */
  readonly emailHash: EmailHash;
  readonly registry: Registry;
  readonly readiness: ReadinessCheck[];
  readonly logger: Logger;
  /** Per-tenant token buckets: Redis when REDIS_URL is set, else in memory. */
  readonly rateLimiter: RateLimiter;
  /**
   * Usage samples: gateway publisher + KPI consumer source (Kafka when KAFKA_BROKERS is set, else
   * in-process, or dropped in a process that runs no KPI consumer: see RuntimeOptions).
   */
  readonly usage: UsageBus;
  /** Releases everything in reverse order of creation. */
  close(): Promise<void>;
};

export type RuntimeOptions = {
  /**
   * Whether this process may run the KPI usage consumer (default true). False for a gateway on
   * its own: without Kafka its usage samples then have nowhere to go and are dropped.
   */
  readonly usageConsumedHere?: boolean;
};

const okRow = z.object({ ok: z.number() });

export async function createRuntime(config: Config, logger: Logger, options: RuntimeOptions = {}): Promise<Runtime> {
  const closers: Array<() => Promise<void>> = [];
  const close = async () => {
    for (const closeOne of closers.reverse()) {
      await closeOne().catch((error: unknown) => logger.error({ err: error }, 'error while closing'));
    }
  };
  const tracing = activeTracing();
  if (tracing) closers.push(() => tracing.shutdown());
  try {
    let databaseUrl = config.DATABASE_URL ?? (await runningEmbeddedPostgres(config));
    if (!databaseUrl) {
      const started = Date.now();
      const embedded: EmbeddedDatabase = await startEmbeddedPostgres({
        dataDir: config.DATA_DIR,
        port: config.EMBEDDED_PG_PORT,
        log: (message) => logger.info(message),
      });
      closers.push(() => embedded.stop());
      databaseUrl = embedded.url;
      logger.info({ port: config.EMBEDDED_PG_PORT, ms: Date.now() - started }, 'embedded PostgreSQL started');
    }
    const applied = await migrate(databaseUrl, allMigrations);
    if (applied.length > 0) logger.info({ applied }, 'migrations applied');

    const pool = await createDatabasePool(databaseUrl, { applicationName: 'employee-analytics' });
    closers.push(() => pool.end());
    const tenantReader = await createTenantReader(databaseUrl);
    closers.push(() => tenantReader.end());
    // EVENTSTORE_URL switches the log to KurrentDB/EventStoreDB; checkpoints and read models stay in PostgreSQL.
    // Engine clients load only when configured (the KurrentDB client and its gRPC stack are ~35 MB).
    const untracedStore = config.EVENTSTORE_URL
      ? await import('../shared/event-store/eventstoredb/eventStore.ts').then((esdb) =>
          esdb.createEventStoreDbEventStore(esdb.connectEventStoreDb(config.EVENTSTORE_URL as string)),
        )
      : createPostgresEventStore(pool, { listenUrl: databaseUrl });
    const keks = await loadKeyEncryptionKeys(config);
    const dataKeys = createDataKeyStore(pool, keks, {
      // Keys and events in one PostgreSQL database: an event's synchronous commit makes its key durable too.
      asynchronousCommit: !config.EVENTSTORE_URL,
    });
    closers.push(async () => dataKeys.close?.());
    const emailHash = await loadEmailHash(config);
    const sealedStore = createSealingEventStore(untracedStore, {
      keys: dataKeys,
      policy: employeePersonalData,
      bulkOpener: () => startBulkOpener(keks),
    });
    // With tracing on, each append is a span and carries the request's trace context in its events' metadata.
    const eventStore = tracing ? traceEventStore(sealedStore) : sealedStore;
    closers.push(() => eventStore.close());

    const registry = new Registry();
    collectDefaultMetrics({ register: registry });
    const rateLimiter = await createConfiguredRateLimiter(config, registry, logger);
    closers.push(() => rateLimiter.close());

    const usage = await createConfiguredUsageBus(config, {
      registry,
      logger,
      groupId: DEFAULT_KPI_GROUP,
      consumedHere: options.usageConsumedHere,
    });
    closers.push(() => usage.source.stop());
    closers.push(() => usage.publisher.close());

    const readiness: ReadinessCheck[] = [
      { name: 'postgres', check: async () => void (await pool.oneFirst(sql.type(okRow)`select 1 as ok`)) },
      ...(config.EVENTSTORE_URL ? [{ name: 'eventstore', check: () => eventStore.ping() }] : []),
      // Kafka carries usage samples only: the publisher buffers and never blocks a request,
      // and the KPI reads that need the topic head answer 503 on their own. Taking every gateway out
      // of the load balancer for it would turn lost telemetry into an outage: reported, not fatal.
      ...(config.KAFKA_BROKERS ? [{ name: 'kafka', critical: false, check: () => usage.source.ping() }] : []),
      // Parked (dead-letter) projection events: reported as degraded, never unready.
      parkedEventsReadiness(pool),
    ];
    registerParkedEventsMetric(registry, pool);
    if (config.REDIS_URL) {
      readiness.push({
        name: 'redis',
        // With a fail-open limiter the gateway keeps serving without Redis: reported, not fatal.
        critical: !config.RATE_LIMIT_FAIL_OPEN,
        // The limiter's own connection, which fails fast (no offline queue): down is said at once.
        check: () => rateLimiter.ping(),
      });
    }
    return {
      config,
      databaseUrl,
      pool,
      tenantReader,
      eventStore,
      logStore: untracedStore,
      logInDatabase: !config.EVENTSTORE_URL,
      dataKeys,
      emailHash,
      registry,
      readiness,
      logger,
      rateLimiter,
      usage,
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}
