import { allProjections } from '../projectors.ts';
import type { Projection } from '../../shared/projections/projection.ts';
import { ProjectionSupersededError } from '../../shared/projections/versionGuard.ts';
import { runProjection } from '../../shared/projections/follow.ts';
import { DEFAULT_KPI_GROUP, startKpiConsumer } from '../../projections/kpi/consumer.ts';
import { activeTracing, traceProjection } from '../../shared/telemetry/tracing.ts';
import { serveHealth, type RoleContext, type RoleHandle } from './process.ts';

/** What `projector <name>` runs: the event-store projections of that name, plus its Kafka consumer. */
export type ProjectorSelection = { readonly projections: readonly Projection[]; readonly usageConsumer: boolean };

/**
 * `employees` selects the projection named so; `kpi` selects every `kpi-*` projection and the
 * usage-sample consumer (Kafka → rollups). An exact projection name selects just that one.
 */
export function selectProjector(name: string, projections: readonly Projection[] = allProjections): ProjectorSelection {
  const selected = projections.filter((p) => p.name === name || p.name.startsWith(`${name}-`));
  const usageConsumer = name === 'kpi';
  if (selected.length === 0 && !usageConsumer) {
    const groups = [...new Set(projections.map((p) => p.name.split('-')[0] ?? p.name))];
    throw new Error(`unknown projector ${JSON.stringify(name)}; known: ${[...new Set([...groups, 'kpi'])].join(', ')}`);
  }
  return { projections: selected, usageConsumer };
}

/**
 * Starts the selected projectors on the runtime's event store. Several processes may run the
 * same projector: each page's checkpoint update is a compare-and-set, so exactly one instance
 * applies a page and the others resubscribe from the new checkpoint.
 */
export async function startProjectors({ logger, runtime }: RoleContext, selection: ProjectorSelection): Promise<RoleHandle> {
  const handles = selection.projections.map((projection) =>
    runProjection(runtime.pool, runtime.eventStore, activeTracing() ? traceProjection(projection) : projection, {
      onError: (error) =>
        error instanceof ProjectionSupersededError
          ? logger.error(
              { err: error, projection: projection.name },
              'a newer version of this projection is live; this projector stops (rolling deploy)',
            )
          : logger.error({ err: error, projection: projection.name }, 'projector failed; retrying'),
      onParked: (event, error) =>
        logger.warn(
          {
            projection: projection.name,
            eventId: event.id,
            streamId: event.streamId,
            type: event.type,
            tenantId: event.metadata.tenantId,
            error,
          },
          'event parked (dead-letter); the projection goes on without it',
        ),
    }),
  );
  let consumer: { stop(): Promise<void> } | undefined;
  if (selection.usageConsumer) {
    // The runtime's bus: Kafka when KAFKA_BROKERS is set, else in-process (only useful in the `all` role).
    consumer = await startKpiConsumer(runtime.pool, runtime.usage.source, DEFAULT_KPI_GROUP);
  }
  return {
    async close() {
      await Promise.all([...handles.map((h) => h.stop()), consumer?.stop()]);
    },
  };
}

/** `projector <name>` as its own process: the projectors plus a health/metrics endpoint. */
export async function startProjectorRole(context: RoleContext, name: string): Promise<RoleHandle> {
  const selection = selectProjector(name);
  if (selection.usageConsumer && context.runtime.usage.transport !== 'kafka') {
    throw new Error('the kpi projector in its own process needs KAFKA_BROKERS (usage samples come from Kafka)');
  }
  if (selection.usageConsumer) {
    // Consuming Kafka is this process's whole job: unready without it (for the other roles Kafka
    // only degrades readiness, services/runtime.ts).
    const { readiness } = context.runtime;
    const kafka = readiness.findIndex((check) => check.name === 'kafka');
    const check = readiness[kafka];
    if (check) readiness[kafka] = { ...check, critical: true };
  }
  const projectors = await startProjectors(context, selection);
  const health = await serveHealth(context.runtime, context.config.HOST, context.config.PORT);
  context.logger.info(
    {
      projector: name,
      projections: selection.projections.map((p) => p.name),
      usageConsumer: selection.usageConsumer,
      health: health.address,
    },
    'projector running',
  );
  process.stdout.write(`projector ${name} running (health: ${health.address}/health/live)\n`);
  return {
    async close() {
      await health.close();
      await projectors.close();
    },
  };
}
