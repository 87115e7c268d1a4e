import type { Registry } from 'prom-client';
import { publisherMetrics } from './metrics.ts';
import type { UsageSamplePublisher, UsageSampleSource } from './port.ts';

/**
 * The metrics bus of a process whose usage samples nothing can consume: a gateway running as its
 * own process without KAFKA_BROKERS. The in-process transport only reaches a KPI consumer in the
 * same process (the `all` role), and the `projector kpi` role refuses to run without Kafka, so
 * such a gateway's samples can never be applied anywhere.
 *
 * Before, that gateway used the in-process transport anyway: it kept up to 100,000 samples in
 * memory that no one would read (each request's sample survived the young generation, and the
 * old one filled with them), and its KPI `asOf` stayed at the oldest of them, since a buffered
 * sample counts as pending. Here each sample is counted as dropped (`no_consumer`) and let go at
 * once, nothing is pending, and the role says so when it starts.
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
