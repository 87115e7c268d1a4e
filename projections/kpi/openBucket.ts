import { z } from 'zod';
import { sql, type DatabaseTransactionConnection } from '../../shared/db/pool.ts';
import { pgIso } from '../../shared/db/timestamps.ts';
import { floorTo, type SeriesInterval } from '../../shared/series/intervals.ts';
import { usageAtHorizon } from './query.ts';
import { readRevenueAsOf } from './revenue.ts';
import type { KpiMetric } from './series.ts';

/**
 * A KPI's value in the bucket still open, as of the series' horizon `asOf`: the reads the summary
 * makes (`usageAtHorizon`, `readRevenueAsOf`), so the open point and the summary at the same
 * instant answer the same numbers. `requests` counts the bucket so far: its whole hours from the
 * hour rows, the current hour from the minute rows (kept 72 h, so always there for it), up to and
 * including `asOf`'s minute, like the summary's latency window.
 */
export async function openBucketValue(
  tx: DatabaseTransactionConnection,
  tenantId: string,
  metric: KpiMetric,
  interval: SeriesInterval,
  asOf: number,
): Promise<number> {
  switch (metric) {
    case 'mrr':
    case 'arr':
    case 'churnRate':
      return (await readRevenueAsOf(tx, tenantId, new Date(asOf)))[metric];
    case 'dau':
    case 'mau':
    case 'apiLatencyP95Ms':
      return (await usageAtHorizon(tx, tenantId, asOf))[metric];
    case 'requests':
      return requestsSince(tx, tenantId, floorTo(interval, asOf), asOf);
    default: {
      const never: never = metric;
      throw new Error(`unknown metric ${String(never)}`);
    }
  }
}

const requestsRow = z.object({ requests: z.number() });

async function requestsSince(tx: DatabaseTransactionConnection, tenantId: string, start: number, asOf: number): Promise<number> {
  const hour = floorTo('hour', asOf);
  return tx.oneFirst(sql.type(requestsRow)`
    select (
      coalesce((select sum(samples) from kpi_usage_hours
                where tenant_id = ${tenantId} and hour >= ${pgIso(start)} and hour < ${pgIso(hour)}), 0)
      + coalesce((select sum(samples) from kpi_usage_minutes
                  where tenant_id = ${tenantId} and minute >= ${pgIso(Math.max(start, hour))} and minute <= ${pgIso(asOf)}), 0)
    )::int8 as requests
  `);
}
