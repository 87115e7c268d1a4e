import { z } from 'zod';
import { loadConfig } from '../../shared/config.ts';
import { createDatabasePool } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/logger.ts';
import { DEFAULT_KPI_GROUP, kafkaKpiSource, startKpiConsumer } from './consumer.ts';

/**
 * The KPI projector as its own process (scaled-out deployments; the crash tests SIGKILL it):
 * `DATABASE_URL=… KAFKA_BROKERS=… node projections/kpi/worker.ts`. The schema must already be
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
