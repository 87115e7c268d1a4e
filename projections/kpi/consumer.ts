import type { DatabasePool } from '../../shared/db/pool.ts';
import { createKafkaSource } from '../../shared/metrics-bus/kafka.ts';
import type { UsageSampleSource } from '../../shared/metrics-bus/port.ts';
import { createUsageRollupSink } from './usageRollup.ts';

export const DEFAULT_KPI_GROUP = 'kpi-usage-rollups';

export type KpiConsumerHandle = {
  /** Samples this process applied (not counting replays it skipped). */
  readonly applied: () => number;
  readonly source: UsageSampleSource;
  stop(): Promise<void>;
};

/** Runs the KPI projector: usage samples from `source` folded into the PostgreSQL rollups. */
export async function startKpiConsumer(pool: DatabasePool, source: UsageSampleSource, group = DEFAULT_KPI_GROUP): Promise<KpiConsumerHandle> {
  const sink = createUsageRollupSink(pool, { group });
  await source.start(sink);
  return { applied: sink.applied, source, stop: () => source.stop() };
}

export type KafkaKpiConsumerOptions = {
  readonly brokers: readonly string[];
  readonly topic: string;
  readonly group?: string;
  readonly sessionTimeoutMs?: number;
  readonly logger?: { warn(obj: object, msg: string): void; error(obj: object, msg: string): void };
};

export function kafkaKpiSource(options: KafkaKpiConsumerOptions): UsageSampleSource {
  return createKafkaSource({
    brokers: options.brokers,
    topic: options.topic,
    groupId: options.group ?? DEFAULT_KPI_GROUP,
    ...(options.sessionTimeoutMs ? { sessionTimeoutMs: options.sessionTimeoutMs, heartbeatIntervalMs: Math.max(500, Math.floor(options.sessionTimeoutMs / 6)) } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
  });
}
