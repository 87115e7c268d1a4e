import { z } from 'zod';
import { loadConfig } from '../../shared/config.ts';
import { createDatabasePool } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/logger.ts';
import { createKafkaSource } from '../../shared/metrics-bus/kafkaSource.ts';
import type { UsageSampleSource } from '../../shared/metrics-bus/port.ts';
import { DEFAULT_KPI_GROUP, startKpiConsumer } from './consumer.ts';

/**
 * The KPI projector as its own process (scaled-out deployments; the crash tests SIGKILL it):
 * `DATABASE_URL=… KAFKA_BROKERS=… node projections/kpi/consumerProcess.ts`. The schema must already be
 * migrated (the service does it on start). SIGTERM finishes the batch in hand and leaves the
 * group cleanly; SIGKILL is safe too (offsets commit with the rollups).
 */
const extra = z
  .object({
    KPI_CONSUMER_GROUP: z.string().min(1).default(DEFAULT_KPI_GROUP),
    KPI_SESSION_TIMEOUT_MS: z.coerce.number().int().min(6_000).optional(),
  })
  .parse(process.env);
const config = loadConfig();
const logger = createLogger(config, 'kpi-worker');
if (!config.DATABASE_URL || !config.KAFKA_BROKERS) {
  logger.fatal('the KPI worker needs DATABASE_URL and KAFKA_BROKERS');
  process.exit(2);
}
const pool = await createDatabasePool(config.DATABASE_URL, { applicationName: 'kpi-worker' });
const consumer = await startKpiConsumer(
  pool,
  kafkaKpiSource({
    brokers: config.KAFKA_BROKERS,
    topic: config.KAFKA_METRICS_TOPIC,
    group: extra.KPI_CONSUMER_GROUP,
    logger,
    ...(extra.KPI_SESSION_TIMEOUT_MS ? { sessionTimeoutMs: extra.KPI_SESSION_TIMEOUT_MS } : {}),
  }),
  extra.KPI_CONSUMER_GROUP,
);
logger.info({ topic: config.KAFKA_METRICS_TOPIC, group: extra.KPI_CONSUMER_GROUP }, 'kpi worker consuming');
process.stdout.write('kpi-worker: consuming\n');

const stop = async () => {
  await consumer.stop();
  await pool.end();
  process.exit(0);
};
process.on('SIGTERM', () => void stop());
process.on('SIGINT', () => void stop());

function kafkaKpiSource(options: {
  readonly brokers: readonly string[];
  readonly topic: string;
  readonly group?: string;
  readonly sessionTimeoutMs?: number;
  readonly logger?: { warn(obj: object, msg: string): void; error(obj: object, msg: string): void };
}): UsageSampleSource {
  return createKafkaSource({
    brokers: options.brokers,
    topic: options.topic,
    groupId: options.group ?? DEFAULT_KPI_GROUP,
    ...(options.sessionTimeoutMs
      ? { sessionTimeoutMs: options.sessionTimeoutMs, heartbeatIntervalMs: Math.max(500, Math.floor(options.sessionTimeoutMs / 6)) }
      : {}),
    ...(options.logger ? { logger: options.logger } : {}),
  });
}
