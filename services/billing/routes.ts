import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { formatPosition, type EventStore } from '../../shared/event-store/port.ts';
import { problemSchema } from '../gateway/problems.ts';
import { requireAuth } from '../gateway/requestContext.ts';
import { billingEventsBody, ingestBillingEvents } from './ingest.ts';

export type BillingRoutesDeps = {
  readonly store: EventStore;
};

const ingestResponse = z.object({
  accepted: z.number().int(),
  duplicates: z.number().int(),
  position: z.string().nullable().describe('Log position of the batch; send it as X-Min-Position to read your writes'),
});

const problems = { 400: problemSchema, 401: problemSchema, 403: problemSchema } as const;

/**
 * The billing ingest route. Its path lies under `/analytics` and the gateway mounts it right after
 * the KPI reads: clients and the API document see one analytics API.
 */
export function billingRoutes(deps: BillingRoutesDeps) {
  return async (scope: FastifyInstance): Promise<void> => {
    const app = scope.withTypeProvider<ZodTypeProvider>();

    app.post(
      '/analytics/billing-events',
      {
        config: { permission: 'analytics:write', responseHeaders: ['X-Log-Position'] },
        schema: {
          tags: ['analytics'],
          operationId: 'recordBillingEvents',
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
