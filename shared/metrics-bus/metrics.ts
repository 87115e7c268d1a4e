import { Counter, Gauge, type Registry } from 'prom-client';

/** Prometheus instruments of a publisher, shared by every adapter (one set per registry). */
export type PublisherMetrics = {
  readonly published: Counter;
  readonly dropped: Counter<'reason'>;
  readonly buffered: Gauge;
};

const cache = new WeakMap<Registry, PublisherMetrics>();

export function publisherMetrics(registry: Registry): PublisherMetrics {
  let metrics = cache.get(registry);
  if (!metrics) {
    metrics = {
      published: new Counter({
        name: 'usage_samples_published_total',
        help: 'Usage samples handed to the metrics transport',
        registers: [registry],
      }),
      dropped: new Counter({
        name: 'usage_samples_dropped_total',
        help: 'Usage samples dropped: buffer_full (the transport was unavailable too long), no_consumer (no Kafka and no KPI consumer in this process)',
        labelNames: ['reason'] as const,
        registers: [registry],
      }),
      buffered: new Gauge({
        name: 'usage_samples_buffered',
        help: 'Usage samples waiting in the publisher buffer',
        registers: [registry],
      }),
    };
    cache.set(registry, metrics);
  }
  return metrics;
}
