import kafkajs, { type Kafka } from 'kafkajs';

// What both ends of the Kafka transport share: the client's settings and the log they write to.
const { Kafka: KafkaClient, logLevel } = kafkajs;

export type Log = { warn(obj: object, msg: string): void; error(obj: object, msg: string): void };
export const silent: Log = { warn: () => undefined, error: () => undefined };

export function createKafkaClient(brokers: readonly string[], clientId: string): Kafka {
  return new KafkaClient({
    clientId,
    brokers: [...brokers],
    logLevel: logLevel.NOTHING,
    connectionTimeout: 1_000,
    requestTimeout: 10_000,
    retry: { retries: 2, initialRetryTime: 100, maxRetryTime: 1_000 },
  });
}
