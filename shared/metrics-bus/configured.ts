import type { Registry } from 'prom-client';
import type { Config } from '../config.ts';
import { createDiscardingBus } from './discarding.ts';
import { createInProcessBus } from './inProcess.ts';
import type { UsageSamplePublisher, UsageSampleSource } from './port.ts';

type Log = { warn(obj: object, msg: string): void; error(obj: object, msg: string): void };

/** The process's metrics bus: both ends, built from configuration. */
export type UsageBus = {
  /** `none`: no Kafka and no KPI consumer in this process, so samples are counted and dropped. */
  readonly transport: 'kafka' | 'in-process' | 'none';
  readonly publisher: UsageSamplePublisher;
  /** The consumer end, for the KPI projector (started only by roles that run it). */
  readonly source: UsageSampleSource;
};

/**
 * KAFKA_BROKERS set → kafkajs on KAFKA_METRICS_TOPIC (gateways and KPI projectors may then be
 * separate processes); unset → the in-process transport (the embedded default, one process), or,
 * in a process that runs no KPI consumer (`consumedHere: false`, a gateway on its own), none:
 * its samples could never be applied, so they are dropped and the process warns once.
 */
export async function createConfiguredUsageBus(
  config: Pick<Config, 'KAFKA_BROKERS' | 'KAFKA_METRICS_TOPIC'>,
  options: { registry: Registry; logger?: Log; groupId: string; consumedHere?: boolean },
): Promise<UsageBus> {
  if (config.KAFKA_BROKERS) {
    // kafkajs is loaded only when Kafka is configured: the embedded default never pays for it.
    const [{ createKafkaPublisher }, { createKafkaSource }] = await Promise.all([
      import('./kafkaPublisher.ts'),
      import('./kafkaSource.ts'),
    ]);
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
  if (options.consumedHere === false) {
    options.logger?.warn(
      { usageSamples: 'discarded' },
      'KAFKA_BROKERS is not set and this process runs no KPI consumer: usage samples are dropped, so dau, mau and apiLatencyP95Ms get no new data (set KAFKA_BROKERS and run `npm start -- projector kpi`, or run every part in one process)',
    );
    return { transport: 'none', ...createDiscardingBus({ registry: options.registry }) };
  }
  return {
    transport: 'in-process',
    ...createInProcessBus({
      registry: options.registry,
      ...(options.logger ? { onError: (err: unknown) => options.logger?.error({ err }, 'kpi rollup failed; retrying') } : {}),
    }),
  };
}
