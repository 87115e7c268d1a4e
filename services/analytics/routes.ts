import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { DatabasePool } from '../../shared/db/pool.ts';
import type { TenantReader } from '../../shared/db/tenantReader.ts';
import { BadRequestError } from '../../shared/errors.ts';
import type { EventStore } from '../../shared/event-store/port.ts';
import { kpiBillingProjection } from '../../projections/kpi/billingProjection.ts';
import { readKpiSummary, type KpiReadDeps, type UsageProgress } from '../../projections/kpi/query.ts';
import { MAX_SERIES_POINTS, SERIES_INTERVALS } from '../../shared/series/intervals.ts';
import { KPI_METRICS, readKpiSeries, readKpiSummaryAt } from '../../projections/kpi/series.ts';
import { seriesPointSchema } from '../../shared/series/openBucket.ts';
import { problemSchema } from '../gateway/problems.ts';
import { requireAuth } from '../gateway/requestContext.ts';
import { awaitMinPosition, readYourWritesDeps, readYourWritesHeaders } from '../gateway/readYourWrites.ts';
import { instant as sharedInstant } from '../../shared/validation.ts';
import { workforceRoutes } from './workforceRoutes.ts';

export type AnalyticsRoutesDeps = {
  readonly pool: DatabasePool;
  /** Transaction-free tenant-scoped reads for the workforce series; without it they run in `withTenant` transactions. */
  readonly tenantReader?: TenantReader | undefined;
  readonly store: EventStore;
  /** The KPI consumer's end of the metrics bus, for the usage watermark (`asOf`). */
  readonly usage?: UsageProgress;
  readonly now?: () => number;
  /** Longest GET /kpi waits for the billing projection to reach `X-Min-Position`. */
  readonly readWaitMs?: number;
};

export const kpiSummarySchema = z
  .object({
    mrr: z.number().describe('Monthly recurring revenue, major currency units (exact, rounded to 4 decimals)'),
    arr: z.number().describe('Annual recurring revenue = 12 × mrr'),
    churnRate: z.number().min(0).max(1).describe('Subscriber churn over the 30 days ending at asOf, a fraction'),
    dau: z.number().int().describe('Distinct users with an authenticated request in the 24 h ending at asOf'),
    mau: z.number().int().describe('Distinct users with an authenticated request in the 30 days ending at asOf'),
    apiLatencyP95Ms: z.number().describe('p95 server duration over the 24 h ending at asOf (0 without requests)'),
    asOf: z.string().describe('ISO 8601 UTC instant up to which every input has been applied'),
    currency: z.string().nullable().describe('ISO 4217 currency of mrr and arr; null before the first billing event'),
  })
  .meta({ id: 'KpiSummary' });

/** The shared instant (bounded length, years 1970–9999 after normalising), as epoch ms. */
const instant = (description: string) =>
  sharedInstant()
    .transform((iso) => Date.parse(iso))
    .describe(description);

const kpiQuery = z.object({
  at: instant('Answer the summary as it was at this instant (ISO 8601 with offset); default: now').optional(),
});

const seriesQuery = z.object({
  metric: z.enum(KPI_METRICS).describe('Which KPI'),
  from: instant('First instant of the range (inclusive); points lie on interval boundaries (UTC, weeks start on Monday)'),
  to: instant('Last instant of the range (inclusive)'),
  interval: z.enum(SERIES_INTERVALS).describe('Spacing of the points'),
});

export const kpiSeriesSchema = z
  .object({
    metric: z.enum(KPI_METRICS),
    interval: z.enum(SERIES_INTERVALS),
    currency: z.string().nullable().optional().describe('ISO 4217 currency of mrr / arr points; null before the first billing event'),
    asOf: z.string().describe('Points after this instant (the KPI watermark) are left out; the open bucket, if any, is answered as of it'),
    points: z
      .array(seriesPointSchema)
      .max(MAX_SERIES_POINTS)
      .describe(
        'The metric as of each interval boundary in [from, to] (requests: count in the interval ending at the boundary); ' +
          'when the range reaches asOf, a last point at asOf for the bucket still open, flagged partial (requests: count so far)',
      ),
  })
  .meta({ id: 'KpiSeries' });

const problems = { 400: problemSchema, 401: problemSchema, 403: problemSchema } as const;

/** The analytics capability: the KPI and workforce reads. Mount it inside the authenticated scope. */
export function analyticsRoutes(deps: AnalyticsRoutesDeps) {
  const now = deps.now ?? Date.now;
  const positionWait = readYourWritesDeps(deps.pool, deps.readWaitMs);
  const kpiPorts: KpiReadDeps = { pool: deps.pool, eventStore: deps.store, ...(deps.usage ? { usage: deps.usage } : {}) };
  const workforce = workforceRoutes({
    pool: deps.pool,
    tenantReader: deps.tenantReader,
    ...(deps.readWaitMs !== undefined && { readWaitMs: deps.readWaitMs }),
    ...(deps.now ? { now: deps.now } : {}),
  });
  return async (scope: FastifyInstance): Promise<void> => {
    const app = scope.withTypeProvider<ZodTypeProvider>();
    await workforce(scope);

    app.get(
      '/analytics/kpi',
      {
        config: { permission: 'analytics:read', responseHeaders: ['X-Consistency'] },
        schema: {
          tags: ['analytics'],
          operationId: 'getKpiSummary',
          summary: 'KPI summary of the tenant (now, or as it was at `at`)',
          headers: readYourWritesHeaders,
          querystring: kpiQuery,
          response: { 200: kpiSummarySchema, ...problems, 503: problemSchema },
        },
      },
      async (request, reply) => {
        const auth = requireAuth(request);
        await awaitMinPosition(request, reply, positionWait, kpiBillingProjection.name, request.headers['x-min-position']);
        const at = request.query.at;
        return at === undefined ? readKpiSummary(kpiPorts, auth.tenantId, now()) : readKpiSummaryAt(kpiPorts, auth.tenantId, at, now());
      },
    );

    app.get(
      '/analytics/kpi/series',
      {
        config: { permission: 'analytics:read' },
        schema: {
          tags: ['analytics'],
          operationId: 'getKpiSeries',
          summary: `One KPI over time (at most ${MAX_SERIES_POINTS.toLocaleString('en')} points)`,
          querystring: seriesQuery,
          response: { 200: kpiSeriesSchema, ...problems, 503: problemSchema },
        },
      },
      async (request) => {
        const auth = requireAuth(request);
        const { metric, interval, from, to } = request.query;
        if (from > to)
          throw new BadRequestError('from must not be after to', { errors: [{ path: 'from', message: 'must not be after to' }] });
        const series = await readKpiSeries(kpiPorts, auth.tenantId, { metric, interval, from, to }, now());
        if (!series) {
          throw new BadRequestError(`More than ${MAX_SERIES_POINTS} points; narrow the range or choose a longer interval`, {
            errors: [{ path: 'interval', message: `more than ${MAX_SERIES_POINTS} points` }],
          });
        }
        return series;
      },
    );
  };
}
