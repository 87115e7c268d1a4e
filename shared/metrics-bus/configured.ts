import type { Registry } from 'prom-client';
import type { Config } from '../config.ts';
import { createInProcessBus } from './inProcess.ts';
import type { UsageSamplePublisher, UsageSampleSource } from './port.ts';

type Log = { warn(obj: object, msg: string): void; error(obj: object, msg: string): void };

/** The process's metrics bus: both ends, built from configuration. */
export type UsageBus = {
  readonly transport: 'kafka' | 'in-process';
  readonly publisher: UsageSamplePublisher;
  /** The consumer end, for the KPI projector (started only by roles that run it). */
  readonly source: UsageSampleSource;
};

/**
 * KAFKA_BROKERS set → kafkajs on KAFKA_METRICS_TOPIC (gateways and KPI projectors may then be
 * separate processes); unset → the in-process transport (the embedded default, one process).
 */
export async function createConfiguredUsageBus(
  config: Pick<Config, 'KAFKA_BROKERS' | 'KAFKA_METRICS_TOPIC'>,
  options: { registry: Registry; logger?: Log; groupId: string },
): Promise<UsageBus> {
  if (config.KAFKA_BROKERS) {
    // kafkajs is loaded only when Kafka is configured: the embedded default never pays for it.
    const { createKafkaPublisher, createKafkaSource } = await import('./kafka.ts');
    return {
      transport: 'kafka',
      publisher: createKafkaPublisher({
        brokers: config.KAFKA_BROKERS,
        topic: config.KAFKA_METRICS_TOPIC,
        registry: options.registry,
        ...(options.logger ? { logger: options.logger } : {}),
      }),
      source: createKafkaSource({
        brokers: config.KAFKA_BROKERS,
        topic: config.KAFKA_METRICS_TOPIC,
        groupId: options.groupId,
        ...(options.logger ? { logger: options.logger } : {}),
      }),
    };
  }
  return { transport: 'in-process', ...createInProcessBus({ registry: options.registry, ...(options.logger ? { onError: (err: unknown) => options.logger?.error({ err }, 'kpi rollup failed; retrying') } : {}) }) };
}
