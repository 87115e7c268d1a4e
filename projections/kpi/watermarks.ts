import { z } from 'zod';
import { ServiceUnavailableError } from '../../shared/errors.ts';
import { sql, type DatabasePool } from '../../shared/db/pool.ts';
import { comparePositions, type EventStore } from '../../shared/event-store/port.ts';
import type { UsageSampleSource } from '../../shared/metrics-bus/port.ts';
import { readCheckpoint } from '../runner/runner.ts';
import { BILLING_STORED_TYPES } from './billingEvents.ts';
import { kpiBillingProjection } from './billingProjection.ts';
import { DEFAULT_KPI_GROUP } from './consumer.ts';

/**
 * The KPI watermarks: instants up to which every input has been applied (a KPI's `asOf`).
 * Both come from the pipelines' own progress against the head of their log, never from one
 * tenant's traffic: an idle tenant's KPI is as fresh as everyone's.
 */

const recordedMs = (recordedAt: string) => Date.parse(recordedAt) - 1;

/**
 * Billing: the kpi-billing checkpoint against the event store's head. Caught up (checkpoint at
 * or past the head) → `now`. Behind → 1 ms before the first billing event it has not applied
 * (found within one filtered scan window); if the window ends before the head without one, 1 ms
 * before the first event of any type after the checkpoint (conservative: never claims an
 * unapplied event, however far behind the projector is).
 */
export async function billingWatermark(pool: DatabasePool, store: EventStore, now: number): Promise<number> {
  const checkpoint = await readCheckpoint(pool, kpiBillingProjection.name);
  // No checkpoint yet: the projector has not built its tables (first start, seconds).
  if (!checkpoint) throw new ServiceUnavailableError('The KPI projection is being built; retry shortly', {}, { 'retry-after': '2' });
  const head = await store.headPosition();
  if (comparePositions(checkpoint.position, head) >= 0) return now;
  const pending = await store.readAll({ after: checkpoint.position, maxCount: 1, eventTypes: Object.values(BILLING_STORED_TYPES) });
  const first = pending.events[0];
  if (first) return Math.min(now, recordedMs(first.recordedAt));
  if (comparePositions(pending.checkpoint, head) >= 0) return now; // scanned to the head: nothing of ours pending
  const next = (await store.readAll({ after: checkpoint.position, maxCount: 1 })).events[0];
  return next ? Math.min(now, recordedMs(next.recordedAt)) : now;
}

const offsetRow = z.object({ partition: z.number(), next_offset: z.string(), applied_until: z.string().nullable() });

export type UsageProgress = {
  /** The consumer's end of the metrics bus (its `head` or `oldestPending`). */
  readonly source: Pick<UsageSampleSource, 'head' | 'oldestPending'>;
  /** The KPI consumer group whose stored offsets count. Default `kpi-usage-rollups`. */
  readonly group?: string;
};

/**
 * Usage: how far the KPI consumer has applied the metrics bus, across every partition.
 * - Kafka: the topic's end offsets (asked now) against the offsets stored with the rollups. A
 *   partition applied up to its end contributes the instant the end was read; one that is behind
 *   contributes the newest sample timestamp applied from it (samples of a partition arrive
 *   roughly in time order), or 0 when nothing was applied from it yet. The minimum wins.
 * - In-process: 1 ms before the oldest sample still buffered or being applied, else `now`.
 * - Neither (a source that tells nothing): `now`.
 * Samples still in a gateway's send buffer (milliseconds, normally) are not counted.
 */
export async function usageWatermark(pool: DatabasePool, progress: UsageProgress | undefined, now: number): Promise<number> {
  const source = progress?.source;
  if (source?.head) {
    const head = await source.head();
    const rows = await pool.any(sql.type(offsetRow)`
      select partition, next_offset::text, applied_until from kpi_kafka_offsets
      where consumer_group = ${progress?.group ?? DEFAULT_KPI_GROUP} and topic = ${head.topic}
    `);
    const stored = new Map(rows.map((r) => [r.partition, r]));
    let watermark = Math.min(now, head.at);
    for (const [partition, { low, high }] of head.partitions) {
      const row = stored.get(partition);
      const applied = row ? BigInt(row.next_offset) : BigInt(low);
      if (applied >= BigInt(high)) continue;
      const until = row?.applied_until ? Date.parse(row.applied_until) : 0;
      watermark = Math.min(watermark, until);
    }
    return watermark;
  }
  const oldest = source?.oldestPending?.() ?? null;
  return oldest === null ? now : Math.min(now, oldest - 1);
}

/** What the KPI reads need: the read models, and the pipelines' progress for their watermarks. */
export type KpiReadDeps = { readonly pool: DatabasePool; readonly eventStore: EventStore; readonly usage?: UsageProgress };

/**
 * The horizon up to which KPIs are answered (their `asOf`): now, or earlier while inputs are
 * pending: billing events for the revenue KPIs, usage samples for the usage KPIs, both for a summary.
 */
export async function kpiHorizon(deps: KpiReadDeps, now: number, inputs: 'billing' | 'usage' | 'both'): Promise<number> {
  const [billingAt, usageAt] = await Promise.all([
    inputs === 'usage' ? now : billingWatermark(deps.pool, deps.eventStore, now),
    inputs === 'billing' ? now : usageWatermark(deps.pool, deps.usage, now),
  ]);
  return Math.min(billingAt, usageAt);
}
