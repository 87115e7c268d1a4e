/**
 * The metrics bus: how usage samples travel from the gateway to the KPI projector. Telemetry,
 * not domain events: it never goes into the event store. Two adapters implement it —
 * Kafka (kafkajs, `kafkaPublisher.ts` and `kafkaSource.ts`) and an in-process transport for the embedded default
 * (`inProcess.ts`) — so another client library can replace kafkajs without touching callers.
 */

/** One authenticated request, as the gateway saw it. */
export type UsageSample = {
  readonly tenantId: string;
  readonly userId: string;
  /** Route template (`/v1/employees/:id`), never the raw URL. */
  readonly route: string;
  readonly method: string;
  readonly status: number;
  /** Server-side duration in milliseconds. */
  readonly durationMs: number;
  /** When the response was sent, epoch milliseconds. */
  readonly timestamp: number;
};

/** Producer side. `publish` never blocks and never throws: a request must not wait on the bus. */
export interface UsageSamplePublisher {
  publish(sample: UsageSample): void;
  /** Waits (bounded) until everything buffered so far was handed to the transport. */
  flush(timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

/** Where a batch came from, for sources that can resume (Kafka): the consumer stores it. */
export type BatchOrigin = {
  readonly topic: string;
  readonly partition: number;
  /** Offset of the first message in the batch. */
  readonly firstOffset: string;
  /** Offset to resume from after this batch (last offset + 1). */
  readonly nextOffset: string;
  /** Offset of each sample, parallel to `samples` (messages that did not decode are absent). */
  readonly offsets: readonly string[];
};

export type SampleBatch = {
  readonly origin: BatchOrigin | null;
  readonly samples: readonly UsageSample[];
};

/** What applying a batch decided: done, or the source must restart the partition elsewhere. */
export type ApplyOutcome = { readonly kind: 'applied' } | { readonly kind: 'seek'; readonly offset: string };

/** Consumer side: the projector that folds batches into its store, and owns the resume offsets. */
export interface UsageSampleSink {
  /** The offsets to resume each partition from (next offset to read), as stored by `apply`. */
  storedOffsets(topic: string, partitions: readonly number[]): Promise<ReadonlyMap<number, string>>;
  /** Applies one batch atomically (its offsets with it). Called for one partition at a time. */
  apply(batch: SampleBatch): Promise<ApplyOutcome>;
}

/** A log transport's head, for watermarks: per partition, the offsets it holds right now. */
export type TransportHead = {
  readonly topic: string;
  /** When the head was asked for (epoch ms): everything written before it is at or below `high`. */
  readonly at: number;
  /** `low`: first offset still held; `high`: the offset the next message will get. */
  readonly partitions: ReadonlyMap<number, { readonly low: string; readonly high: string }>;
};

export interface UsageSampleSource {
  /** Starts delivering batches to `sink` (in the background; a source retries until its transport answers). */
  start(sink: UsageSampleSink): Promise<void>;
  stop(): Promise<void>;
  /** Throws when the transport is unusable (readiness). */
  ping(): Promise<void>;
  /**
   * Log transports (Kafka): the topic's end offsets, to compare with the offsets the sink
   * stored (the KPI `asOf` watermark). Works whether or not this process consumes.
   */
  head?(): Promise<TransportHead>;
  /**
   * In-memory transports: the timestamp of the oldest sample handed to `publish` and not yet
   * applied by the sink, or null when nothing is pending.
   */
  oldestPending?(): number | null;
}
