import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { DatabasePool } from '../../shared/db/pool.ts';
import { BadRequestError } from '../../shared/errors.ts';
import { formatPosition, parsePosition, type EventStore } from '../../shared/event-store/port.ts';
import { waitForCheckpoint } from '../../projections/runner/runner.ts';
import { kpiBillingProjection } from '../../projections/kpi/billingProjection.ts';
import { readKpiSummary, type UsageProgress } from '../../projections/kpi/query.ts';
import { problemSchema } from '../gateway/problems.ts';
import { requireAuth } from '../gateway/requestContext.ts';
import { billingEventsBody, ingestBillingEvents } from './billing.ts';

export type AnalyticsRoutesDeps = {
  readonly pool: DatabasePool;
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

const ingestResponse = z.object({
  accepted: z.number().int(),
  duplicates: z.number().int(),
  position: z.string().nullable().describe('Log position of the batch; send it as X-Min-Position to read your writes'),
});

const problems = { 400: problemSchema, 401: problemSchema, 403: problemSchema } as const;

/** The analytics capability (SPEC §4). Mount it inside the authenticated scope. */
export function analyticsRoutes(deps: AnalyticsRoutesDeps) {
  const now = deps.now ?? Date.now;
  const readWaitMs = deps.readWaitMs ?? 2_000;
  return async (scope: FastifyInstance): Promise<void> => {
    const app = scope.withTypeProvider<ZodTypeProvider>();

    app.get(
      '/analytics/kpi',
      {
        config: { permission: 'analytics:read' },
        schema: {
          tags: ['analytics'],
          summary: 'KPI summary of the tenant',
          headers: z.object({ 'x-min-position': z.string().optional() }),
          response: { 200: kpiSummarySchema, ...problems, 503: problemSchema },
        },
      },
      async (request) => {
        const auth = requireAuth(request);
        const wanted = request.headers['x-min-position'];
        if (wanted !== undefined) {
          const position = parsePosition(wanted);
          if (!position) throw new BadRequestError('X-Min-Position must be a log position as returned by a write');
          await waitForCheckpoint(deps.pool, kpiBillingProjection.name, position, readWaitMs);
        }
        return readKpiSummary({ pool: deps.pool, eventStore: deps.store, ...(deps.usage ? { usage: deps.usage } : {}) }, auth.tenantId, now());
      },
    );

    app.post(
      '/analytics/billing-events',
      {
        config: { permission: 'analytics:write' },
        schema: {
          tags: ['analytics'],
          summary: 'Record subscription billing events (idempotent by eventId)',
          body: billingEventsBody,
          response: { 202: ingestResponse, ...problems, 409: problemSchema, 422: problemSchema },
        },
      },
      async (request, reply) => {
        const auth = requireAuth(request);
        const result = await ingestBillingEvents(deps.store, auth.tenantId, auth.userId, request.body.events);
        const position = result.position ? formatPosition(result.position) : null;
        if (position) reply.header('x-log-position', position);
        return reply.code(202).send({ accepted: result.accepted, duplicates: result.duplicates, position });
      },
    );
  };
}
