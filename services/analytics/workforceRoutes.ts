import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { DatabasePool } from '../../shared/db/pool.ts';
import type { TenantReader } from '../../shared/db/tenantReader.ts';
import { BadRequestError } from '../../shared/errors.ts';
import { HIRE_MIN_YEAR, instant, safeText } from '../../shared/validation.ts';
import { addIntervals, inclusiveEnd, MAX_SERIES_POINTS, seriesInstants } from '../../shared/series/intervals.ts';
import { seriesPoint } from '../../shared/series/openBucket.ts';
import { WORKFORCE_PROJECTION } from '../../projections/workforce/workforceProjection.ts';
import { readWorkforceAt, readWorkforceSeries, WORKFORCE_METRICS, type Bucket } from '../../projections/workforce/series.ts';
import { problemSchema } from '../gateway/problems.ts';
import { requireAuth } from '../gateway/requestContext.ts';
import { awaitMinPosition, readYourWritesDeps, readYourWritesHeaders } from '../gateway/readYourWrites.ts';

export type WorkforceRoutesDeps = {
  readonly pool: DatabasePool;
  /** When given, series read through it (no transaction; see shared/db/tenantReader.ts). */
  readonly tenantReader?: TenantReader | undefined;
  readonly now?: () => number;
  /** Longest a read waits for the workforce projection to reach `X-Min-Position`. */
  readonly readWaitMs?: number;
};

export const WORKFORCE_INTERVALS = ['day', 'week', 'month'] as const;

/** An instant as epoch ms; years from 1900, as hire dates may lie there. */
const at = (description: string) =>
  instant({ minYear: HIRE_MIN_YEAR })
    .transform((iso) => Date.parse(iso))
    .describe(description);

const seriesQuery = z
  .object({
    metric: z.enum(WORKFORCE_METRICS).describe('Which figure'),
    interval: z.enum(WORKFORCE_INTERVALS).describe('Bucket size (UTC days, ISO weeks from Monday, calendar months)'),
    from: at('A point for every bucket that starts in [from, to] (inclusive), up to now'),
    to: at('Last instant a bucket may start at (inclusive)'),
    department: safeText(100, { trim: true, min: 1 }).optional().describe('Only this department (slug)'),
  })
  .strict();

export const workforceSeriesSchema = z
  .object({
    metric: z.enum(WORKFORCE_METRICS),
    interval: z.enum(WORKFORCE_INTERVALS),
    department: z.string().optional(),
    points: z
      .array(
        z.object({
          at: z.string().describe('Start of the bucket (ISO 8601 UTC)'),
          value: z.number(),
          partial: z.literal(true).optional().describe('The bucket is still open: its figures so far, up to now'),
        }),
      )
      .max(MAX_SERIES_POINTS)
      .describe('headcount at the end of each bucket; hires and exits in it; turnoverRate = exits ÷ average headcount'),
  })
  .meta({ id: 'WorkforceSeries' });

export const workforceSummarySchema = z
  .object({
    headcount: z.number().int().describe('Employees active or on leave at asOf'),
    byDepartment: z.record(z.string(), z.number().int()).describe('The same by department slug ("" for employees without one)'),
    asOf: z.string().describe('ISO 8601 UTC instant the figures are for'),
  })
  .meta({ id: 'WorkforceSummary' });

const problems = { 400: problemSchema, 401: problemSchema, 403: problemSchema } as const;
const badRange = (path: string, message: string) => new BadRequestError(`${path} ${message}`, { errors: [{ path, message }] });

/**
 * The buckets of a series: one per `interval` boundary in [from, to] not after now; the bucket
 * holding now ends at now (inclusive) and is partial. Null when more than `MAX_SERIES_POINTS`.
 */
export function workforceBuckets(from: number, to: number, interval: (typeof WORKFORCE_INTERVALS)[number], now: number): Bucket[] | null {
  const starts = seriesInstants(from, to, interval);
  if (!starts) return null;
  return starts
    .filter((start) => start <= now)
    .map((start) => {
      const end = addIntervals(interval, start, 1);
      const open = inclusiveEnd(now);
      return end > open ? { start, end: open, partial: true } : { start, end, partial: false };
    });
}

/** The workforce reads (headcount, hires, exits, turnover). Mounted inside the authenticated scope. */
export function workforceRoutes(deps: WorkforceRoutesDeps) {
  const now = deps.now ?? Date.now;
  const positionWait = readYourWritesDeps(deps.pool, deps.readWaitMs);
  return async (scope: FastifyInstance): Promise<void> => {
    const app = scope.withTypeProvider<ZodTypeProvider>();

    app.get(
      '/analytics/workforce',
      {
        config: { permission: 'analytics:read', responseHeaders: ['X-Consistency'] },
        schema: {
          tags: ['analytics'],
          operationId: 'getWorkforceSummary',
          summary: 'Headcount by department, now or at an instant',
          headers: readYourWritesHeaders,
          querystring: z.object({ at: at('The instant (ISO 8601 with offset); default and latest: now').optional() }).strict(),
          response: { 200: workforceSummarySchema, ...problems },
        },
      },
      async (request, reply) => {
        const auth = requireAuth(request);
        await awaitMinPosition(request, reply, positionWait, WORKFORCE_PROJECTION, request.headers['x-min-position']);
        const asOf = Math.min(request.query.at ?? now(), now());
        return { ...(await readWorkforceAt(deps.pool, auth.tenantId, asOf)), asOf: new Date(asOf).toISOString() };
      },
    );

    app.get(
      '/analytics/workforce/series',
      {
        config: { permission: 'analytics:read', responseHeaders: ['X-Consistency'] },
        schema: {
          tags: ['analytics'],
          operationId: 'getWorkforceSeries',
          summary: `Headcount, hires, exits or turnover over time (at most ${MAX_SERIES_POINTS.toLocaleString('en')} points)`,
          headers: readYourWritesHeaders,
          querystring: seriesQuery,
          response: { 200: workforceSeriesSchema, ...problems },
        },
      },
      async (request, reply) => {
        const auth = requireAuth(request);
        const { metric, interval, from, to, department } = request.query;
        if (from > to) throw badRange('from', 'must not be after to');
        const buckets = workforceBuckets(from, to, interval, now());
        if (!buckets) throw badRange('interval', `more than ${MAX_SERIES_POINTS} points; narrow the range or choose a longer interval`);
        await awaitMinPosition(request, reply, positionWait, WORKFORCE_PROJECTION, request.headers['x-min-position']);
        const values = await readWorkforceSeries(deps.tenantReader ?? deps.pool, auth.tenantId, {
          metric,
          monthly: interval === 'month',
          buckets,
          department,
        });
        return {
          metric,
          interval,
          ...(department !== undefined && { department }),
          points: buckets.map((b, i) => seriesPoint({ at: b.start, partial: b.partial }, values[i]!)),
        };
      },
    );
  };
}
