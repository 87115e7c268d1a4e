import { z } from 'zod';
import { sql, withTenant, type DatabaseTransactionConnection } from '../../shared/db/pool.ts';
import { pgIso } from '../../shared/db/timestamps.ts';
import { createSketch, deserializeSketch, mergeInto, quantile, quantileSerialized, type DDSketch } from '../../shared/sketch/ddsketch.ts';
import { countDistinct, deserializeDistinct, emptyDistinct, mergeDistinct, type DistinctSketch } from '../../shared/sketch/distinct.ts';
import {
  addIntervals,
  DAY,
  floorTo,
  isoInstant,
  MAX_SERIES_POINTS,
  seriesInstants,
  type SeriesInterval,
} from '../../shared/series/intervals.ts';
import { kpiHorizon, readKpiSummaryAtHorizon, tenantCurrency, type KpiReadDeps, type KpiSummary } from './query.ts';
import { openBucketValue } from './openBucket.ts';
import { seriesPoint, withOpenBucket, type SeriesPoint } from '../../shared/series/openBucket.ts';
import { loadRevenueHistories } from './revenue.ts';
import { divideRounded, unitsToNumber } from '../../shared/money.ts';
import { CHURN_WINDOW_MS, type CustomerHistory, type RevenueKpis } from './subscriptions.ts';

/**
 * KPIs over time: `GET /v1/analytics/kpi/series` and `GET /v1/analytics/kpi?at=`.
 *
 * Usage KPIs at an instant T are read from the hour and day rollups at hour resolution: the
 * windows are the whole hours ending at E = T rounded down to the hour (E = T on the hour, which
 * every series point is). dau / apiLatencyP95Ms: [E − 24 h, E); mau: [E − 30 d, E); requests
 * (series only): the interval ending at the point. A window is read as day rows where whole UTC
 * days fit and hour rows at its edges; sketches merge exactly (DDSketch counts add, distinct
 * sketches union), so the grouping never changes the answer and a series point equals
 * `kpi?at=` at the same instant.
 *
 * Cost is bounded by the number of points, not by traffic: a series reads one row per hour
 * (hour interval) or per day (other intervals) of its range plus one window, and merges each
 * atom about three times (two-stack sliding window), whatever the number of samples.
 */
export const KPI_METRICS = ['mrr', 'arr', 'churnRate', 'dau', 'mau', 'apiLatencyP95Ms', 'requests'] as const;
export type KpiMetric = (typeof KPI_METRICS)[number];
const MAU_WINDOW = 30 * DAY;

// ---------------------------------------------------------------------------------------------
// Sliding-window merge (two stacks): windows [lo, hi) over atoms, with lo and hi non-decreasing.
// Each atom is merged O(1) times amortised, so 365 mau points cost ~3 × 395 merges, not 365 × 30.
// ---------------------------------------------------------------------------------------------

export function slidingMerge<S>(
  atoms: readonly S[],
  windows: readonly (readonly [number, number])[],
  empty: S,
  merge: (a: S, b: S) => S,
): S[] {
  const suffix = new Map<number, S>();
  let qlo = 0;
  let qhi = 0;
  let backStart = 0;
  let back = empty;
  const out: S[] = [];
  for (const [lo, hi] of windows) {
    if (lo < qlo || hi < qhi) throw new RangeError('windows must move forward');
    if (lo >= qhi) {
      qlo = qhi = backStart = lo;
      back = empty;
      suffix.clear();
    }
    while (qhi < hi) back = merge(back, atoms[qhi++]!);
    while (qlo < lo) {
      if (qlo === backStart) {
        // Front stack empty: move the back stack over, as suffix aggregates.
        let agg = empty;
        for (let k = qhi - 1; k >= backStart; k--) suffix.set(k, (agg = merge(atoms[k]!, agg)));
        backStart = qhi;
        back = empty;
      }
      suffix.delete(qlo++);
    }
    out.push(merge(qlo < backStart ? suffix.get(qlo)! : empty, back));
  }
  return out;
}

const mergeLatency = (a: DDSketch, b: DDSketch): DDSketch => {
  if (b.count === 0) return a;
  if (a.count === 0) return b;
  return mergeInto(mergeInto(createSketch(a.relativeAccuracy), a), b);
};
const EMPTY_LATENCY = createSketch();
const EMPTY_USERS = emptyDistinct();
const p95Of = (sketch: DDSketch) => {
  const p95 = quantile(sketch, 0.95);
  return p95 === undefined ? 0 : Math.round(p95 * 100) / 100;
};

/**
 * `revenueAsOf` (projections/kpi/subscriptions.ts, the snapshot's definition) at many instants:
 * the same rules with every instant parsed once and ARR swept over the movements in time order,
 * so 365 points × 200 customers is a few milliseconds instead of re-parsing every date per point.
 * A property test checks it equals `revenueAsOf` at every instant.
 */
export function revenueSeries(customers: readonly CustomerHistory[], instants: readonly number[]): RevenueKpis[] {
  const parsed = customers.map((c) => ({
    periods: c.periods.map((p) => ({ start: Date.parse(p.startedAt), end: p.endedAt === null ? Infinity : Date.parse(p.endedAt) })),
  }));
  const movements = customers
    .flatMap((c) => c.movements.map((m) => ({ t: Date.parse(m.occurredAt), delta: m.arrDeltaUnits })))
    .sort((a, b) => a.t - b.t);
  const order = instants.map((t, i) => ({ t, i })).sort((a, b) => a.t - b.t);
  const out = new Array<RevenueKpis>(instants.length);
  let arrUnits = 0n;
  let m = 0;
  for (const { t: end, i } of order) {
    while (m < movements.length && movements[m]!.t <= end) arrUnits += movements[m++]!.delta;
    const start = end - CHURN_WINDOW_MS;
    let activeCustomers = 0;
    let activeAtStart = 0;
    let newInWindow = 0;
    let churned = 0;
    for (const { periods } of parsed) {
      let isActive = false;
      let wasActive = false;
      let startedInWindow = false;
      let endedInWindow = false;
      for (const p of periods) {
        if (p.start <= end && p.end > end) isActive = true;
        if (p.start <= start && p.end > start) wasActive = true;
        if (p.start > start && p.start <= end) startedInWindow = true;
        if (p.end > start && p.end <= end) endedInWindow = true;
      }
      if (isActive) activeCustomers++;
      if (wasActive) activeAtStart++;
      else if (startedInWindow) newInWindow++;
      if ((wasActive || startedInWindow) && endedInWindow && !isActive) churned++;
    }
    const denominator = activeAtStart + newInWindow;
    out[i] = {
      mrr: unitsToNumber(divideRounded(arrUnits, 12n)),
      arr: unitsToNumber(arrUnits),
      churnRate: denominator === 0 ? 0 : churned / denominator,
      activeCustomers,
      churn: { churned, activeAtStart, newInWindow },
    };
  }
  return out;
}

/** Revenue KPIs at each instant from the billing projection's histories, loaded once for the range. */
async function revenueAt(tx: DatabaseTransactionConnection, tenantId: string, instants: readonly number[]): Promise<RevenueKpis[]> {
  if (instants.length === 0) return [];
  const histories = await loadRevenueHistories(tx, tenantId, {
    from: new Date(Math.min(...instants)),
    to: new Date(Math.max(...instants)),
  });
  return revenueSeries(histories, instants);
}

// ---------------------------------------------------------------------------------------------
// Reading the rollups
// ---------------------------------------------------------------------------------------------

type Atom = {
  start: number;
  samples: number;
  userCount: number;
  latencyBytes: Buffer | null;
  latency: () => DDSketch;
  users: DistinctSketch;
};
type Need = { latency: boolean; users: boolean };

const atomRow = z.object({
  start: z.string(),
  samples: z.number(),
  user_count: z.number().nullable(),
  sketch: z.instanceof(Buffer).nullable(),
  users: z.instanceof(Buffer).nullable(),
});

async function loadAtoms(
  tx: DatabaseTransactionConnection,
  tenantId: string,
  level: 'hour' | 'day',
  start: number,
  end: number,
  need: Need,
): Promise<Atom[]> {
  if (start >= end) return [];
  const table = sql.identifier([level === 'hour' ? 'kpi_usage_hours' : 'kpi_usage_days']);
  const column = sql.identifier([level]);
  const rows = await tx.any(sql.type(atomRow)`
    select ${column} as start, samples, users as user_count,
           ${need.latency ? sql.fragment`latency_sketch` : sql.fragment`null::bytea`} as sketch,
           ${need.users ? sql.fragment`users_sketch` : sql.fragment`null::bytea`} as users
    from ${table} where tenant_id = ${tenantId} and ${column} >= ${pgIso(start)} and ${column} < ${pgIso(end)}
    order by ${column}
  `);
  return rows.map((r) => ({
    start: Date.parse(r.start),
    samples: r.samples,
    userCount: r.user_count ?? 0,
    latencyBytes: r.sketch,
    latency: () => (r.sketch === null ? EMPTY_LATENCY : deserializeSketch(r.sketch)),
    users: r.users === null ? EMPTY_USERS : deserializeDistinct(r.users),
  }));
}

/** Atoms covering [start, end) (hour-aligned): hour rows at the edges, day rows for whole days. */
async function loadWindow(tx: DatabaseTransactionConnection, tenantId: string, start: number, end: number, need: Need): Promise<Atom[]> {
  const dayStart = floorTo('day', start) === start ? start : floorTo('day', start) + DAY;
  const dayEnd = floorTo('day', end);
  if (dayStart >= dayEnd) return loadAtoms(tx, tenantId, 'hour', start, end, need);
  return [
    ...(await loadAtoms(tx, tenantId, 'hour', start, dayStart, need)),
    ...(await loadAtoms(tx, tenantId, 'day', dayStart, dayEnd, need)),
    ...(await loadAtoms(tx, tenantId, 'hour', dayEnd, end, need)),
  ];
}

const lowerBound = (atoms: readonly Atom[], t: number) => {
  let lo = 0;
  let hi = atoms.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (atoms[mid]!.start < t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
};

/** The metrics read from the billing history (the rest from the usage rollups). */
const isRevenueMetric = (metric: KpiMetric): metric is 'mrr' | 'arr' | 'churnRate' =>
  metric === 'mrr' || metric === 'arr' || metric === 'churnRate';

export type KpiSeries = {
  readonly metric: KpiMetric;
  readonly interval: SeriesInterval;
  readonly currency?: string | null;
  readonly asOf: string;
  readonly points: SeriesPoint[];
};

/**
 * One metric at every `interval` boundary in `[from, to]` (`seriesInstants`). Points after the
 * metric's horizon (now, or the watermark of its pending inputs) are left out; when the range
 * reaches the horizon, the last point is the bucket still open, at the horizon (`withOpenBucket`),
 * with the summary's numbers there (`openBucketValue`). `null` when the answer would have more
 * than `MAX_SERIES_POINTS` points, the open one included: counted against the horizon read for
 * the answer, so a past range of exactly that many boundaries fits whatever `to` is.
 */
export async function readKpiSeries(
  deps: KpiReadDeps,
  tenantId: string,
  query: { metric: KpiMetric; interval: SeriesInterval; from: number; to: number },
  now: number = Date.now(),
): Promise<KpiSeries | null> {
  const instants = seriesInstants(query.from, query.to, query.interval);
  if (!instants) return null;
  const asOf = await kpiHorizon(deps, now, isRevenueMetric(query.metric) ? 'billing' : 'usage');
  const answered = withOpenBucket(instants, query, asOf);
  if (answered.length > MAX_SERIES_POINTS) return null;
  const open = answered.find((p) => p.partial);
  const closed = answered.filter((p) => !p.partial).map((p) => p.at);
  return withTenant(deps.pool, tenantId, async (tx) => {
    const values = await closedValues(tx, tenantId, query.metric, query.interval, closed);
    const points = closed.map((at, i) => seriesPoint({ at, partial: false }, values[i]!));
    if (open) points.push(seriesPoint(open, await openBucketValue(tx, tenantId, query.metric, query.interval, asOf)));
    const base = { metric: query.metric, interval: query.interval, asOf: isoInstant(asOf), points };
    if (query.metric !== 'mrr' && query.metric !== 'arr') return base;
    return { ...base, currency: await tenantCurrency(tx, tenantId) };
  });
}

/** The metric at closed interval boundaries (`instants`, ascending, aligned to `interval`). */
async function closedValues(
  tx: DatabaseTransactionConnection,
  tenantId: string,
  metric: KpiMetric,
  interval: SeriesInterval,
  instants: readonly number[],
): Promise<number[]> {
  if (isRevenueMetric(metric)) return (await revenueAt(tx, tenantId, instants)).map((r) => r[metric]);
  if (instants.length === 0) return [];
  const first = instants[0]!;
  const last = instants.at(-1)!;
  const windowOf = (t: number): readonly [number, number] => {
    switch (metric) {
      case 'dau':
      case 'apiLatencyP95Ms':
        return [t - DAY, t];
      case 'mau':
        return [t - MAU_WINDOW, t];
      case 'requests':
        return [addIntervals(interval, t, -1), t];
      default: {
        const never: never = metric;
        throw new Error(`unknown metric ${String(never)}`);
      }
    }
  };
  const level = interval === 'hour' ? 'hour' : 'day';
  // dau at day/week/month points: the window is exactly one day row, whose count is stored.
  const dauByDay = metric === 'dau' && level === 'day';
  const need = { latency: metric === 'apiLatencyP95Ms', users: metric === 'mau' || (metric === 'dau' && !dauByDay) };
  const atoms = await loadAtoms(tx, tenantId, level, windowOf(first)[0], last, need);
  const ranges = instants.map((t) => {
    const [start, end] = windowOf(t);
    return [lowerBound(atoms, start), lowerBound(atoms, end)] as const;
  });
  switch (metric) {
    case 'requests': {
      const prefix = [0];
      for (const a of atoms) prefix.push(prefix.at(-1)! + a.samples);
      return ranges.map(([lo, hi]) => prefix[hi]! - prefix[lo]!);
    }
    case 'apiLatencyP95Ms': {
      // Daily points: each window is one day row, answered from its bytes (no sketch built).
      if (ranges.every(([lo, hi]) => hi - lo <= 1)) {
        return ranges.map(([lo, hi]) => {
          const bytes = hi > lo ? atoms[lo]!.latencyBytes : null;
          const p95 = bytes ? quantileSerialized(bytes, 0.95) : undefined;
          return p95 === undefined ? 0 : Math.round(p95 * 100) / 100;
        });
      }
      const merged = slidingMerge(
        atoms.map((a) => a.latency()),
        ranges,
        EMPTY_LATENCY,
        mergeLatency,
      );
      return merged.map(p95Of);
    }
    default: {
      if (dauByDay) return ranges.map(([lo, hi]) => (hi - lo === 1 ? atoms[lo]!.userCount : 0));
      const merged = slidingMerge(
        atoms.map((a) => a.users),
        ranges,
        EMPTY_USERS,
        mergeDistinct,
      );
      return merged.map(countDistinct);
    }
  }
}

/**
 * The KPI summary as it was at `at` (`GET /v1/analytics/kpi?at=`), answered at asOf =
 * min(at, horizon). An `at` at or after `now` is the summary now, at minute resolution: no
 * request after it can exist yet. An earlier `at`, even one past a lagging horizon, is read from
 * the rollups at hour resolution (see above): `kpi_user_activity` holds each user's latest
 * request, which may come after `at`. The usage windows end at asOf rounded down to the hour, as
 * the rollups cannot split an hour and nothing made after `at` may be counted; revenue is exact.
 */
export async function readKpiSummaryAt(deps: KpiReadDeps, tenantId: string, at: number, now: number = Date.now()): Promise<KpiSummary> {
  const horizon = await kpiHorizon(deps, now, 'both');
  if (at >= now) return readKpiSummaryAtHorizon(deps, tenantId, horizon);
  const asOf = Math.min(at, horizon);
  const end = floorTo('hour', asOf);
  return withTenant(deps.pool, tenantId, async (tx) => {
    const day = await loadWindow(tx, tenantId, end - DAY, end, { latency: true, users: true });
    const month = await loadWindow(tx, tenantId, end - MAU_WINDOW, end, { latency: false, users: true });
    const [revenue] = await revenueAt(tx, tenantId, [asOf]);
    return {
      mrr: revenue!.mrr,
      arr: revenue!.arr,
      churnRate: revenue!.churnRate,
      dau: countDistinct(day.reduce((acc, a) => mergeDistinct(acc, a.users), EMPTY_USERS)),
      mau: countDistinct(month.reduce((acc, a) => mergeDistinct(acc, a.users), EMPTY_USERS)),
      apiLatencyP95Ms: p95Of(day.reduce((acc, a) => mergeLatency(acc, a.latency()), EMPTY_LATENCY)),
      asOf: isoInstant(asOf),
      currency: await tenantCurrency(tx, tenantId),
    };
  });
}
