import kafkajs, { type Consumer, type EachBatchPayload } from 'kafkajs';
import { ServiceUnavailableError } from '../errors.ts';
import { decodeSamples } from './codec.ts';
import { createKafkaClient, silent, type Log } from './kafkaClient.ts';
import type { TransportHead, UsageSample, UsageSampleSink, UsageSampleSource } from './port.ts';

/** How long a fetched topic head is reused (KPI watermark reads). */
const HEAD_REUSE_MS = 250;

/**
 * kafkajs's ways of saying "the broker cannot be reached or did not answer in time": a refused or
 * unresolvable address (KafkaJSConnectionError, code ECONNREFUSED / ENOTFOUND / none for a
 * connection timeout), a request timeout, no broker or coordinator to ask, and the retrier giving
 * up on any of those (KafkaJSNumberOfRetriesExceeded: it only retries retriable failures).
 * Anything else (SASL refused, a non-retriable protocol error) is a fault, not an outage.
 */
const UNREACHABLE: ReadonlyArray<abstract new (...args: never[]) => Error> = [
  kafkajs.KafkaJSConnectionError,
  kafkajs.KafkaJSRequestTimeoutError,
  kafkajs.KafkaJSBrokerNotFound,
  kafkajs.KafkaJSGroupCoordinatorNotFound,
  kafkajs.KafkaJSTimeout,
  kafkajs.KafkaJSNumberOfRetriesExceeded,
];

/**
 * The adapter's boundary for calls made on a request's behalf (the KPI watermark's topic head):
 * an unreachable broker becomes the service's ServiceUnavailableError (503 with
 * Retry-After), so the gateway needs no knowledge of kafkajs's error classes. The
 * kafkajs error stays as `cause` for the logs; the broker address does not reach clients.
 */
function unavailableIfUnreachable(error: unknown): unknown {
  // The retrier gave up because the topic does not exist (retriable to kafkajs): the broker is
  // reachable, so it is a fault, not a 503 that would never clear. Other protocol answers it
  // gives up on (no leader during an election or a restart) are an outage: 503.
  if (
    error instanceof kafkajs.KafkaJSNumberOfRetriesExceeded &&
    error.cause instanceof kafkajs.KafkaJSProtocolError &&
    error.cause.type === 'UNKNOWN_TOPIC_OR_PARTITION'
  ) {
    return error;
  }
  if (!UNREACHABLE.some((type) => error instanceof type)) return error;
  const unavailable = new ServiceUnavailableError(
    'Usage metrics are unavailable: the metrics bus cannot be reached; retry shortly',
    {},
    { 'retry-after': '5' },
  );
  unavailable.cause = error;
  return unavailable;
}

export type KafkaSourceOptions = {
  readonly brokers: readonly string[];
  readonly topic: string;
  readonly groupId: string;
  readonly logger?: Log;
  readonly sessionTimeoutMs?: number;
  readonly heartbeatIntervalMs?: number;
  /** Partitions processed in parallel by one consumer. */
  readonly concurrency?: number;
  readonly maxBytesPerPartition?: number;
  /** Per batch: samples applied, messages that were not ours (`invalid`), samples dropped from ours. */
  readonly onBatch?: (info: { partition: number; samples: number; invalid: number; dropped: number }) => void;
};

/**
 * Consumer side of the Kafka transport. The sink owns the offsets (in PostgreSQL, in the same
 * transaction as the rollup): on every assignment the source seeks to the stored offsets, and
 * when the sink finds that a batch does not continue where it left off it answers `seek` and
 * the batch is discarded. Kafka's own committed offsets are written after the sink commits,
 * for lag monitoring only; they never decide what is applied.
 */
export function createKafkaSource(options: KafkaSourceOptions): UsageSampleSource & Required<Pick<UsageSampleSource, 'head'>> {
  const logger = options.logger ?? silent;
  const kafka = createKafkaClient(options.brokers, `eas-kpi-${options.groupId}`);
  let consumer: Consumer | undefined;
  const admin = kafka.admin();
  let adminConnected: Promise<void> | undefined;
  let lastHead: TransportHead | undefined;
  let headInFlight: Promise<TransportHead> | undefined;

  const seekToStored = async (sink: UsageSampleSink, c: Consumer, assignment: Record<string, number[]>) => {
    for (const [topic, partitions] of Object.entries(assignment)) {
      if (topic !== options.topic || partitions.length === 0) continue;
      const stored = await sink.storedOffsets(topic, partitions);
      for (const [partition, offset] of stored) c.seek({ topic, partition, offset });
    }
  };

  const eachBatch = (sink: UsageSampleSink) => async (payload: EachBatchPayload) => {
    const { batch, resolveOffset, heartbeat, isRunning, isStale, commitOffsetsIfNecessary } = payload;
    if (batch.messages.length === 0 || !isRunning() || isStale()) return;
    const samples: UsageSample[] = [];
    const offsets: string[] = [];
    let invalid = 0;
    let dropped = 0;
    const now = Date.now();
    for (const message of batch.messages) {
      const decoded = decodeSamples(message.value, now);
      if (!decoded) {
        invalid++;
        continue;
      }
      dropped += decoded.dropped;
      for (const sample of decoded.samples) {
        samples.push(sample);
        offsets.push(message.offset);
      }
    }
    const first = batch.messages[0]!;
    const last = batch.messages[batch.messages.length - 1]!;
    const outcome = await sink.apply({
      origin: {
        topic: batch.topic,
        partition: batch.partition,
        firstOffset: first.offset,
        nextOffset: (BigInt(last.offset) + 1n).toString(),
        offsets,
      },
      samples,
    });
    if (outcome.kind === 'seek') {
      consumer?.seek({ topic: batch.topic, partition: batch.partition, offset: outcome.offset });
      return;
    }
    resolveOffset(last.offset);
    // Dropped for good (the offset moves past them), so the operator hears of it.
    if (invalid > 0 || dropped > 0) {
      logger.warn(
        { partition: batch.partition, firstOffset: first.offset, invalid, dropped },
        'usage messages or samples dropped: not valid',
      );
    }
    options.onBatch?.({ partition: batch.partition, samples: samples.length, invalid, dropped });
    await commitOffsetsIfNecessary();
    await heartbeat();
  };

  let stopped = false;
  let running: Promise<void> | undefined;

  // One admin connection for the topic check, readiness and heads; a failed connect is forgotten, so the next call tries again.
  const connectAdmin = () =>
    (adminConnected ??= admin.connect().catch((error: unknown) => {
      adminConnected = undefined;
      throw error;
    }));

  const ensureTopic = async () => {
    await connectAdmin();
    // Idempotent (false when it exists); the broker's default partition count applies.
    await admin.createTopics({ topics: [{ topic: options.topic }], waitForLeaders: true });
  };

  const connectAndRun = async (sink: UsageSampleSink) => {
    await ensureTopic();
    const c = kafka.consumer({
      groupId: options.groupId,
      sessionTimeout: options.sessionTimeoutMs ?? 30_000,
      heartbeatInterval: options.heartbeatIntervalMs ?? 3_000,
      maxWaitTimeInMs: 100,
      maxBytesPerPartition: options.maxBytesPerPartition ?? 1_048_576,
      allowAutoTopicCreation: true,
      retry: { retries: 10, initialRetryTime: 200, maxRetryTime: 5_000 },
    });
    consumer = c;
    c.on(c.events.GROUP_JOIN, ({ payload }) => {
      void seekToStored(sink, c, payload.memberAssignment).catch((error: unknown) =>
        logger.error({ err: error }, 'kpi consumer: could not seek to stored offsets'),
      );
    });
    c.on(c.events.CRASH, ({ payload }) => logger.error({ err: payload.error, restart: payload.restart }, 'kpi consumer crashed'));
    await c.connect();
    await c.subscribe({ topic: options.topic, fromBeginning: true });
    await c.run({
      autoCommit: true,
      autoCommitInterval: 1_000,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: options.concurrency ?? 4,
      eachBatch: eachBatch(sink),
    });
  };

  return {
    /** Starts consuming in the background, retrying until Kafka answers: a broker that is down
     *  at start-up must not keep the process (and its gateway) from starting. */
    async start(sink) {
      stopped = false;
      running = (async () => {
        for (let attempt = 0; !stopped; attempt++) {
          try {
            await connectAndRun(sink);
            return;
          } catch (error) {
            if (stopped) return;
            logger.error({ err: error, attempt }, 'kpi consumer: cannot start yet; retrying');
            await consumer?.disconnect().catch(() => undefined);
            consumer = undefined;
            await new Promise((r) => setTimeout(r, Math.min(5_000, 200 * 2 ** Math.min(attempt, 5))));
          }
        }
      })();
    },
    async stop() {
      stopped = true;
      await consumer?.disconnect().catch(() => undefined);
      await running;
      await consumer?.disconnect().catch(() => undefined);
      consumer = undefined;
      if (adminConnected) await admin.disconnect().catch(() => undefined);
      adminConnected = undefined;
    },
    // Readiness only (not on a request's path): kafkajs's own error, whose message says why.
    async ping() {
      await connectAdmin();
      await admin.describeCluster();
    },
    // One ListOffsets round trip, shared by concurrent callers and reused for HEAD_REUSE_MS: a
    // burst of KPI reads costs the broker one request. `at` is taken before asking, so a reused
    // head only makes the watermark older, never ahead of what was applied.
    head() {
      const now = Date.now();
      if (lastHead && now - lastHead.at <= HEAD_REUSE_MS) return Promise.resolve(lastHead);
      headInFlight ??= (async () => {
        try {
          const at = Date.now();
          await connectAdmin();
          const offsets = await admin.fetchTopicOffsets(options.topic);
          lastHead = { topic: options.topic, at, partitions: new Map(offsets.map((o) => [o.partition, { low: o.low, high: o.high }])) };
          return lastHead;
        } catch (error) {
          throw unavailableIfUnreachable(error);
        } finally {
          headInFlight = undefined;
        }
      })();
      return headInFlight;
    },
  };
}
