import fp from 'fastify-plugin';
import { Histogram, type Registry } from 'prom-client';

/** Prometheus request histogram, labelled by route template (never the raw URL). */
export const httpMetricsPlugin = fp<{ registry: Registry }>(
  async (app, { registry }) => {
    const duration = new Histogram({
      name: 'http_request_duration_seconds',
      help: 'Server-side request duration',
      labelNames: ['method', 'route', 'status'] as const,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: [registry],
    });
    app.addHook('onResponse', async (request, reply) => {
      duration.observe(
        { method: request.method, route: request.routeOptions.url ?? 'unmatched', status: String(reply.statusCode) },
        reply.elapsedTime / 1000,
      );
    });
  },
  { name: 'http-metrics' },
);
