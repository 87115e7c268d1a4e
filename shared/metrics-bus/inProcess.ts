import type { Registry } from 'prom-client';
import { BoundedBuffer } from './boundedBuffer.ts';
import { publisherMetrics } from './metrics.ts';
import type { UsageSample, UsageSamplePublisher, UsageSampleSink, UsageSampleSource } from './port.ts';

export type InProcessBusOptions = {
  readonly registry?: Registry;
  /** Samples kept while the sink is slow or failing; the oldest are dropped beyond it. */
  readonly capacity?: number;
  readonly batchSize?: number;
  readonly onError?: (error: unknown) => void;
};

/**
 * The embedded default: samples go from the gateway to the KPI projector through memory, in
 * batches, off the request path. Nothing survives a crash (unlike Kafka); telemetry may lose
 * the last moments, the domain events never.
 */
export function createInProcessBus(options: InProcessBusOptions = {}): {
  publisher: UsageSamplePublisher;
  source: UsageSampleSource;
} {
  const buffer = new BoundedBuffer<UsageSample>(options.capacity ?? 100_000);
  const batchSize = options.batchSize ?? 5_000;
  const metrics = options.registry ? publisherMetrics(options.registry) : undefined;
  let sink: UsageSampleSink | undefined;
  let draining: Promise<void> | undefined;
  let scheduled = false;
  let stopped = false;
  let failures = 0;
  // The batch in the sink's hands (taken from the buffer, not yet applied): pending too.
  let inFlight: readonly UsageSample[] = [];

  const drain = async () => {
    while (sink && !stopped && buffer.size > 0) {
      const samples = buffer.take(batchSize);
      inFlight = samples;
      try {
        await sink.apply({ origin: null, samples });
        inFlight = [];
        failures = 0;
        metrics?.published.inc(samples.length);
      } catch (error) {
        options.onError?.(error);
        inFlight = [];
        const dropped = buffer.requeue(samples);
        if (dropped > 0) metrics?.dropped.inc({ reason: 'buffer_full' }, dropped);
        failures++;
        await new Promise((r) => setTimeout(r, Math.min(5_000, 50 * 2 ** failures)));
      }
    }
    metrics?.buffered.set(buffer.size);
  };

  const schedule = () => {
    if (scheduled || !sink || stopped) return;
    scheduled = true;
    setImmediate(() => {
      scheduled = false;
      if (draining) return void draining.then(schedule);
      draining = drain().finally(() => {
        draining = undefined;
        if (buffer.size > 0) schedule();
      });
    });
  };

  const publisher: UsageSamplePublisher = {
    publish(sample) {
      if (stopped) return;
      const dropped = buffer.push(sample);
      if (dropped > 0) metrics?.dropped.inc({ reason: 'buffer_full' }, dropped);
      schedule();
    },
    async flush(timeoutMs = 5_000) {
      const deadline = Date.now() + timeoutMs;
      while ((buffer.size > 0 || draining) && sink && Date.now() < deadline) {
        await (draining ?? new Promise((r) => setImmediate(r)));
      }
    },
    async close() {
      await publisher.flush();
    },
  };

  const source: UsageSampleSource = {
    async start(s) {
      sink = s;
      stopped = false;
      schedule();
    },
    async stop() {
      stopped = true;
      await draining;
      sink = undefined;
    },
    async ping() {},
    oldestPending() {
      let oldest: number | null = null;
      for (const s of inFlight) if (oldest === null || s.timestamp < oldest) oldest = s.timestamp;
      const queued = buffer.peekMin((s) => s.timestamp);
      return queued === undefined ? oldest : oldest === null ? queued : Math.min(oldest, queued);
    },
  };
  return { publisher, source };
}
