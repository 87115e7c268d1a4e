import { z } from 'zod';
import { sql, withTenant, type DatabaseTransactionConnection } from '../../shared/db/pool.ts';
import { pgIso } from '../../shared/db/timestamps.ts';
import { createSketch, mergeSerializedInto, quantile } from '../../shared/sketch/ddsketch.ts';
import { isoInstant } from '../../shared/series/intervals.ts';
import { readRevenueAsOf } from './revenue.ts';
import { kpiHorizon, type KpiReadDeps } from './watermarks.ts';

export { billingWatermark, kpiHorizon, usageWatermark, type KpiReadDeps, type UsageProgress } from './watermarks.ts';

const MINUTE = 60_000;
const HOUR = 3_600_000;
const DAY = 86_400_000;

export type KpiSummary = {
  readonly mrr: number;
  readonly arr: number;
  readonly churnRate: number;
  readonly dau: number;
  readonly mau: number;
  /** 0 when the tenant made no request in the 24 hours ending at asOf. */
  readonly apiLatencyP95Ms: number;
  readonly asOf: string;
  /** The tenant's billing currency (fixed by its first billing event); null before any. */
  readonly currency: string | null;
};

const sketchRow = z.object({ sketch: z.instanceof(Buffer) });

/**
 * The 1,440 minute buckets ending with asOf's minute, read as whole hours where possible: at
 * most 59 + 24 + 59 rows, however many samples the tenant sent. Merged sketches → p95.
 */
export async function latencyP95(tx: DatabaseTransactionConnection, tenantId: string, asOf: number): Promise<number> {
  const end = asOf - (asOf % MINUTE) + MINUTE; // exclusive
  const start = end - DAY;
  const hourStart = Math.ceil(start / HOUR) * HOUR;
  const hourEnd = Math.floor(end / HOUR) * HOUR;
  // bytea arrives as a Buffer (no hex round trip: half the bytes on the wire, no re-parsing).
  const rows = await tx.anyFirst(sql.type(sketchRow)`
    select latency_sketch as sketch from kpi_usage_hours
    where tenant_id = ${tenantId} and hour >= ${pgIso(hourStart)} and hour < ${pgIso(hourEnd)}
    union all
    select latency_sketch from kpi_usage_minutes
    where tenant_id = ${tenantId}
      and ((minute >= ${pgIso(start)} and minute < ${pgIso(Math.min(hourStart, end))})
        or (minute >= ${pgIso(Math.max(hourEnd, hourStart))} and minute < ${pgIso(end)}))
  `);
  const merged = createSketch();
  for (const bytes of rows) mergeSerializedInto(merged, bytes);
  const p95 = quantile(merged, 0.95);
  return p95 === undefined ? 0 : Math.round(p95 * 100) / 100;
}

/**
 * The KPI summary of one tenant as of `asOf` = min(usage watermark, billing watermark): the
 * instant up to which every input has been applied (`watermarks.ts`), the same for every
 * tenant. dau/mau and p95 cover the windows ending at asOf; MRR and churn are computed as of
 * asOf too (`readRevenueAsOf`). Every read is bounded by the tenant's users, customers and
 * ≤ 142 sketch rows; none grows with the number of requests. Runs under row-level security.
 */
export async function readKpiSummary(deps: KpiReadDeps, tenantId: string, now: number = Date.now()): Promise<KpiSummary> {
  return readKpiSummaryAtHorizon(deps, tenantId, await kpiHorizon(deps, now, 'both'));
}

const currencyRow = z.object({ currency: z.string() });

/** The tenant's billing currency, fixed by its first billing event; null before any. */
export async function tenantCurrency(tx: DatabaseTransactionConnection, tenantId: string): Promise<string | null> {
  return tx.maybeOneFirst(sql.type(currencyRow)`select currency from kpi_billing_tenants where tenant_id = ${tenantId}`);
}

/**
 * The summary at `asOf`, the combined horizon (`kpiHorizon(…, 'both')`: the earlier of the billing
 * and usage watermarks), read now: the summary, and `kpi?at=` at or after now. Usage at minute
 * resolution (`usageAtHorizon`) counts users by their latest request, so it is only right while no
 * request can be later than the instant asked about: never for an `at` in the past.
 */
export async function readKpiSummaryAtHorizon(deps: KpiReadDeps, tenantId: string, asOf: number): Promise<KpiSummary> {
  return withTenant(deps.pool, tenantId, async (tx) => {
    const usage = await usageAtHorizon(tx, tenantId, asOf);
    const revenue = await readRevenueAsOf(tx, tenantId, new Date(asOf));
    const currency = await tenantCurrency(tx, tenantId);
    return {
      mrr: revenue.mrr,
      arr: revenue.arr,
      churnRate: revenue.churnRate,
      ...usage,
      asOf: isoInstant(asOf),
      currency,
    };
  });
}

const usersRow = z.object({ dau: z.number(), mau: z.number() });

/**
 * dau, mau and p95 at the usage horizon, at minute resolution: users by their latest request
 * (`kpi_user_activity`, exact), latency from the minute and hour sketches. Only right at the
 * horizon: `last_seen` cannot say whether a user was active in a window that ended earlier.
 * The summary and the open bucket of a usage series both read it, so they agree.
 */
export async function usageAtHorizon(
  tx: DatabaseTransactionConnection,
  tenantId: string,
  asOf: number,
): Promise<Pick<KpiSummary, 'dau' | 'mau' | 'apiLatencyP95Ms'>> {
  const users = await tx.one(sql.type(usersRow)`
    select count(*) filter (where last_seen > ${pgIso(asOf - DAY)}) as dau,
           count(*) as mau
    from kpi_user_activity where tenant_id = ${tenantId} and last_seen > ${pgIso(asOf - 30 * DAY)}
  `);
  return { dau: users.dau, mau: users.mau, apiLatencyP95Ms: await latencyP95(tx, tenantId, asOf) };
}
