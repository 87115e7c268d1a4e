import { Gauge, type Registry } from 'prom-client';
import type { Queryable } from '../db/pool.ts';
import { countParkedEvents, countParkedEventsOfErased } from './parking.ts';

/**
 * `eas_projection_parked_events{projection}`: events parked by each projection's live version,
 * read from the database at scrape time, so every process (gateway, projector) reports the same.
 * `eas_projection_parked_erased_events{projection}`: those of erased people, whose erasure the
 * projection's model does not show until they are retried or resolved.
 */
export function registerParkedEventsMetric(registry: Registry, db: Queryable): void {
  parkedGauge(
    registry,
    'eas_projection_parked_events',
    'Events a projection could not apply and parked (dead-letter), per projection; 0 when healthy',
    () => countParkedEvents(db),
  );
  parkedGauge(
    registry,
    'eas_projection_parked_erased_events',
    'Parked events of erased people, per projection: their erasure is not in its model until they are retried or resolved; 0 when healthy',
    () => countParkedEventsOfErased(db),
  );
}

/** A per-projection count read at scrape time; a failed read leaves the gauge empty for that scrape. */
function parkedGauge(registry: Registry, name: string, help: string, count: () => Promise<Map<string, number>>): void {
  new Gauge({
    name,
    help,
    labelNames: ['projection'],
    registers: [registry],
    async collect() {
      this.reset();
      const counts = await count().catch(() => new Map<string, number>());
      for (const [projection, parked] of counts) this.set({ projection }, parked);
    },
  });
}

/**
 * A readiness check (structurally services/gateway/health.ts's ReadinessCheck): never critical
 * — a projection with parked events still serves every other event — but reported as degraded,
 * naming the projections and how many events each has parked.
 */
export function parkedEventsReadiness(db: Queryable) {
  return {
    name: 'projections',
    critical: false,
    async check(): Promise<{ degraded: string } | undefined> {
      const counts = await countParkedEvents(db);
      const parked = [...counts].filter(([, n]) => n > 0);
      if (parked.length === 0) return undefined;
      return { degraded: `parked events: ${parked.map(([name, n]) => `${name}=${n}`).join(', ')} (npm run ops -- projections status)` };
    },
  };
}
