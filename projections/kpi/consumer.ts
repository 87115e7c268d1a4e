import type { DatabasePool } from '../../shared/db/pool.ts';
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
export async function startKpiConsumer(
  pool: DatabasePool,
  source: UsageSampleSource,
  group = DEFAULT_KPI_GROUP,
): Promise<KpiConsumerHandle> {
  const sink = createUsageRollupSink(pool, { group });
  await source.start(sink);
  return { applied: sink.applied, source, stop: () => source.stop() };
}
