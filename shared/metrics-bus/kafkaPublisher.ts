import kafkajs, { type Producer } from 'kafkajs';
import type { Registry } from 'prom-client';
import { BoundedBuffer } from './boundedBuffer.ts';
import { packSamples } from './codec.ts';
import { createKafkaClient, silent, type Log } from './kafkaClient.ts';
import { publisherMetrics } from './metrics.ts';
import type { UsageSample, UsageSamplePublisher } from './port.ts';

const { Partitioners } = kafkajs;

export type KafkaPublisherOptions = {
  readonly brokers: readonly string[];
  readonly topic: string;
  readonly registry?: Registry;
  readonly logger?: Log;
  /** Samples held while Kafka is unreachable; beyond it the oldest are dropped (and counted). */
  readonly capacity?: number;
  /** Most samples per produce request. */
  readonly batchSize?: number;
  /** How long a sample may wait for companions before a send. */
  readonly lingerMs?: number;
  readonly clientId?: string;
};

/**
 * Gateway side of the Kafka transport. `publish` appends to a bounded in-memory buffer and
 * returns; one background loop sends batches (keyed by tenant, so a tenant's samples stay in
 * order on one partition). When Kafka is down the loop backs off, the buffer fills, the oldest
 * samples are dropped and `usage_samples_dropped_total` counts them; requests never notice.
 * Delivery is at-least-once on a failed send that in fact reached the broker (the batch is
 * requeued); the idempotent producer removes duplicates from its own retries.
 */
export function createKafkaPublisher(options: KafkaPublisherOptions): UsageSamplePublisher & { readonly bufferedCount: number } {
  const capacity = options.capacity ?? 100_000;
  const batchSize = options.batchSize ?? 5_000;
  const lingerMs = options.lingerMs ?? 20;
  const logger = options.logger ?? silent;
  const metrics = options.registry ? publisherMetrics(options.registry) : undefined;
  const buffer = new BoundedBuffer<UsageSample>(capacity);
  const kafka = createKafkaClient(options.brokers, options.clientId ?? 'eas-gateway');
  let producer: Producer | undefined;
  let closed = false;
  let failures = 0;
  let wake: (() => void) | undefined;
  let inFlight = 0;

  const countDropped = (n: number) => {
    if (n > 0) metrics?.dropped.inc({ reason: 'buffer_full' }, n);
  };

  const connected = async (): Promise<Producer> => {
    if (producer) return producer;
    const created = kafka.producer({
      idempotent: true,
      maxInFlightRequests: 1,
      allowAutoTopicCreation: true,
      createPartitioner: Partitioners.DefaultPartitioner,
      retry: { retries: 2, initialRetryTime: 100, maxRetryTime: 1_000 },
    });
    try {
      await created.connect();
    } catch (error) {
      await created.disconnect().catch(() => undefined);
      throw error;
    }
    producer = created;
    return created;
  };

  const sleep = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        wake = undefined;
        resolve();
      }, ms);
      wake = () => {
        clearTimeout(timer);
        wake = undefined;
        resolve();
      };
    });

  const sendOnce = async (): Promise<void> => {
    const samples = buffer.take(batchSize);
    if (samples.length === 0) return;
    inFlight = samples.length;
    try {
      const p = await connected();
      await p.send({
        topic: options.topic,
        acks: -1,
        messages: packSamples(samples),
      });
      failures = 0;
      metrics?.published.inc(samples.length);
    } catch (error) {
      failures++;
      if (failures === 1 || failures % 50 === 0)
        logger.warn({ err: error, buffered: buffer.size }, 'usage samples: Kafka send failed; buffering');
      inFlight = 0;
      countDropped(buffer.requeue(samples));
      const old = producer;
      producer = undefined;
      void old?.disconnect().catch(() => undefined);
    } finally {
      inFlight = 0;
      metrics?.buffered.set(buffer.size);
    }
  };

  const loop = (async () => {
    while (!closed || (buffer.size > 0 && failures === 0)) {
      if (buffer.size === 0) {
        if (closed) break;
        await sleep(1_000);
        continue;
      }
      if (buffer.size < batchSize && !closed) await sleep(lingerMs);
      await sendOnce();
      if (failures > 0) {
        if (closed) break;
        await sleep(Math.min(5_000, 100 * 2 ** Math.min(failures, 6)));
      }
    }
  })().catch((error: unknown) => logger.error({ err: error }, 'usage sample publisher stopped'));

  return {
    get bufferedCount() {
      return buffer.size + inFlight;
    },
    publish(sample) {
      if (closed) return;
      countDropped(buffer.push(sample));
      // The batch out for sending counts against the bound too: it comes back if the send fails.
      const excess = buffer.size + inFlight - capacity;
      if (excess > 0) countDropped(buffer.take(excess).length);
      if (buffer.size >= batchSize) wake?.();
      else if (buffer.size === 1 && failures === 0) {
        // First sample after a quiet spell: start the linger timer now rather than in 1 s.
        wake?.();
      }
    },
    async flush(timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs;
      while (buffer.size + inFlight > 0 && Date.now() < deadline) {
        wake?.();
        await new Promise((r) => setTimeout(r, 5));
      }
    },
    async close() {
      closed = true;
      wake?.();
      await Promise.race([loop, new Promise((r) => setTimeout(r, 10_000).unref())]);
      metrics?.dropped.inc({ reason: 'shutdown' }, buffer.size);
      await producer?.disconnect().catch(() => undefined);
    },
  };
}
