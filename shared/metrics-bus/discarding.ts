import type { Registry } from 'prom-client';
import { publisherMetrics } from './metrics.ts';
import type { UsageSamplePublisher, UsageSampleSource } from './port.ts';

/**
 * The metrics bus of a process whose usage samples nothing can consume: a gateway running as its
 * own process without KAFKA_BROKERS. The in-process transport only reaches a KPI consumer in the
 * same process (the `all` role), and the `projector kpi` role refuses to run without Kafka, so
 * such a gateway's samples can never be applied anywhere.
 * Each sample is counted as dropped (`no_consumer`) and let go at once, so nothing is pending
 * (the KPI `asOf` is not held back) and nothing is kept in memory; the role warns when it starts.
 */
export function createDiscardingBus(options: { readonly registry?: Registry } = {}): {
  publisher: UsageSamplePublisher;
  source: UsageSampleSource;
} {
  const dropped = options.registry ? publisherMetrics(options.registry).dropped.labels({ reason: 'no_consumer' }) : undefined;
  const publisher: UsageSamplePublisher = {
    publish() {
      dropped?.inc();
    },
    async flush() {},
    async close() {},
  };
  const source: UsageSampleSource = {
    async start() {
      throw new Error('usage samples are discarded in this process (no KAFKA_BROKERS, no KPI consumer here): nothing to consume');
    },
    async stop() {},
    async ping() {},
    oldestPending: () => null,
  };
  return { publisher, source };
}
