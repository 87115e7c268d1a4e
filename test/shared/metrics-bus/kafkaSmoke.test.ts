// Smoke test against the real local Kafka broker (scripts/kafka.sh): admin create topic,
// produce 100 messages, consume all of them in a fresh consumer group, delete the topic.
import { randomUUID } from 'node:crypto';
import kafkajs from 'kafkajs';
import { staysTrue } from '../../support/staysTrue.ts';
import { describe, it, expect } from 'vitest';

const { Kafka, Partitioners, logLevel } = kafkajs;

const BROKERS = (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092')
  .split(',')
  .map((b) => b.trim())
  .filter(Boolean);

const MESSAGE_COUNT = 100;

describe('kafka broker smoke', () => {
  it('round-trips 100 messages through a fresh topic and consumer group', async () => {
    const id = randomUUID();
    const topic = `smoke-${id}`;
    const kafka = new Kafka({ clientId: `smoke-${id}`, brokers: BROKERS, logLevel: logLevel.WARN });
    const admin = kafka.admin();
    const producer = kafka.producer({
      allowAutoTopicCreation: false,
      idempotent: true,
      maxInFlightRequests: 1,
      createPartitioner: Partitioners.DefaultPartitioner,
    });
    // kafkajs disconnect() waits for the in-flight long-poll fetch; keep it short (default 5 s).
    const consumer = kafka.consumer({
      groupId: `smoke-group-${id}`,
      allowAutoTopicCreation: false,
      maxWaitTimeInMs: 250,
    });

    const expected = Array.from({ length: MESSAGE_COUNT }, (_, i) => `value-${String(i).padStart(3, '0')}`);
    const received: string[] = [];
    // Per-partition order must be preserved: track offsets as we go.
    const lastOffset = new Map<number, bigint>();
    let orderViolation: string | undefined;
    let remaining: string[];

    await admin.connect();
    try {
      const created = await admin.createTopics({
        topics: [{ topic, numPartitions: 3, replicationFactor: 1 }],
        waitForLeaders: true,
      });
      expect(created).toBe(true);

      await producer.connect();
      await producer.send({
        topic,
        acks: -1,
        messages: expected.map((value, i) => ({ key: `key-${i % 10}`, value })),
      });
      await producer.disconnect();

      const offsets = await admin.fetchTopicOffsets(topic);
      const total = offsets.reduce((sum, p) => sum + Number(BigInt(p.high) - BigInt(p.low)), 0);
      expect(total).toBe(MESSAGE_COUNT);

      let done!: () => void;
      const allReceived = new Promise<void>((r) => (done = r));
      await consumer.connect();
      await consumer.subscribe({ topics: [topic], fromBeginning: true });
      await consumer.run({
        eachMessage: async ({ partition, message }) => {
          const offset = BigInt(message.offset);
          const prev = lastOffset.get(partition);
          if (prev !== undefined && offset <= prev) {
            orderViolation ??= `partition ${partition}: offset ${offset} after ${prev}`;
          }
          lastOffset.set(partition, offset);
          received.push(message.value?.toString('utf8') ?? '<null>');
          if (received.length >= MESSAGE_COUNT) done();
        },
      });

      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        allReceived,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`timed out: consumed ${received.length}/${MESSAGE_COUNT} messages`)), 45_000);
        }),
      ]).finally(() => clearTimeout(timer));

      // A straggling duplicate (there should be none) would arrive within a moment.
      expect(await staysTrue(() => received.length === MESSAGE_COUNT, 250)).toBe(true);
      expect(orderViolation).toBeUndefined();
      expect(received).toHaveLength(MESSAGE_COUNT);
      expect([...received].sort()).toEqual(expected);
    } finally {
      await consumer.disconnect().catch(() => {});
      await producer.disconnect().catch(() => {});
      await admin.deleteTopics({ topics: [topic], timeout: 10_000 }).catch(() => {});
      remaining = await admin.listTopics().catch(() => []);
      await admin.disconnect();
    }
    // Only reached when the round trip passed (a failure above keeps its own error).
    expect(remaining).not.toContain(topic);
  }, 60_000);
});
