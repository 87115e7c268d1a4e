import type { FastifyInstance } from 'fastify';
import type { UsageSamplePublisher } from '../../shared/metrics-bus/port.ts';
import { waitedOnPurposeMs } from '../gateway/requestContext.ts';

/**
 * The gateway half of the KPI pipeline: one usage sample per authenticated request, emitted
 * after the response is sent. Mount it inside the authenticated scope (first, so its hook
 * covers every route of the scope); requests without `request.auth` (rejected before
 * authentication succeeded) are not counted. `publish` only appends to a buffer. The duration
 * leaves out the time the request waited on purpose (`waitOnPurpose`), which is the client's
 * choice, not the service's latency.
 */
export function usageSamples(publisher: UsageSamplePublisher, now: () => number = Date.now) {
  return async (scope: FastifyInstance): Promise<void> => {
    scope.addHook('onResponse', async (request, reply) => {
      const auth = request.auth;
      if (!auth) return;
      publisher.publish({
        tenantId: auth.tenantId,
        userId: auth.userId,
        route: request.routeOptions.url ?? 'unmatched',
        method: request.method,
        status: reply.statusCode,
        durationMs: Math.max(0, reply.elapsedTime - waitedOnPurposeMs(request)),
        timestamp: now(),
      });
    });
  };
}
