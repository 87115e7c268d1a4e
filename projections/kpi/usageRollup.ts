import type { IdentifierSqlToken } from 'slonik';
import { z } from 'zod';
import { ignoredRows, sql, type DatabasePool, type DatabaseTransactionConnection } from '../../shared/db/pool.ts';
import { pgIso } from '../../shared/db/timestamps.ts';
import type { ApplyOutcome, SampleBatch, UsageSample, UsageSampleSink } from '../../shared/metrics-bus/port.ts';
import { addValue, createSketch, deserializeSketch, mergeInto, serializeSketch, type DDSketch } from '../../shared/sketch/ddsketch.ts';
import {
  addHashes,
  countDistinct,
  deserializeDistinct,
  emptyDistinct,
  hashUserId,
  mergeDistinct,
  serializeDistinct,
  type DistinctSketch,
} from '../../shared/sketch/distinct.ts';

const MINUTE = 60_000;
const HOUR = 3_600_000;
const DAY = 86_400_000;

type Bucket = {
  tenantId: string;
  start: number;
  samples: number;
  errors: number;
  durationSum: number;
  sketch: DDSketch;
  /** Distinct users of the bucket (hour and day levels; minutes keep only the raw ids). */
  userIds: Set<string>;
  users?: DistinctSketch;
};
const newBucket = (tenantId: string, start: number): Bucket => ({
  tenantId,
  start,
  samples: 0,
  errors: 0,
  durationSum: 0,
  sketch: createSketch(),
  userIds: new Set(),
});

/** A batch folded in memory: what it adds to each rollup table. Pure. */
export type BatchAggregate = {
  readonly minutes: Map<string, Bucket>;
  readonly hours: Map<string, Bucket>;
  readonly days: Map<string, Bucket>;
  readonly users: Map<string, { tenantId: string; userId: string; first: number; last: number }>;
  readonly dailyUsers: Map<string, { tenantId: string; day: string; userId: string; samples: number }>;
  readonly tenants: Map<string, { samples: number; last: number }>;
};

export function aggregateSamples(samples: readonly UsageSample[]): BatchAggregate {
  const agg: BatchAggregate = {
    minutes: new Map(),
    hours: new Map(),
    days: new Map(),
    users: new Map(),
    dailyUsers: new Map(),
    tenants: new Map(),
  };
  // Hot loop: one map lookup per sample and level, no per-sample string building or Date.
  let lastTenant = '';
  let lastMinute = -1;
  let minute: Bucket | undefined;
  const dayLabels = new Map<number, string>();
  for (const s of samples) {
    const start = s.timestamp - (s.timestamp % MINUTE);
    if (s.tenantId !== lastTenant || start !== lastMinute || !minute) {
      const key = `${s.tenantId}|${start}`;
      minute = agg.minutes.get(key);
      if (!minute) {
        minute = newBucket(s.tenantId, start);
        agg.minutes.set(key, minute);
      }
      lastTenant = s.tenantId;
      lastMinute = start;
    }
    const duration = s.durationMs > 0 ? s.durationMs : 0;
    minute.samples++;
    if (s.status >= 500) minute.errors++;
    minute.durationSum += duration;
    addValue(minute.sketch, duration);
    minute.userIds.add(s.userId);

    const userKey = `${s.tenantId}|${s.userId}`;
    const user = agg.users.get(userKey);
    if (!user) agg.users.set(userKey, { tenantId: s.tenantId, userId: s.userId, first: s.timestamp, last: s.timestamp });
    else {
      if (s.timestamp < user.first) user.first = s.timestamp;
      if (s.timestamp > user.last) user.last = s.timestamp;
    }
    const dayStart = s.timestamp - (s.timestamp % DAY);
    let day = dayLabels.get(dayStart);
    if (day === undefined) dayLabels.set(dayStart, (day = new Date(dayStart).toISOString().slice(0, 10)));
    const dayKey = `${userKey}|${dayStart}`;
    const daily = agg.dailyUsers.get(dayKey);
    if (daily) daily.samples++;
    else agg.dailyUsers.set(dayKey, { tenantId: s.tenantId, day, userId: s.userId, samples: 1 });
    const tenant = agg.tenants.get(s.tenantId);
    if (tenant) {
      tenant.samples++;
      if (s.timestamp > tenant.last) tenant.last = s.timestamp;
    } else agg.tenants.set(s.tenantId, { samples: 1, last: s.timestamp });
  }
  // Hours are the merge of their minutes, days the merge of their hours: per bucket, not per sample.
  const rollUp = (from: Iterable<Bucket>, into: Map<string, Bucket>, size: number) => {
    for (const b of from) {
      const start = b.start - (b.start % size);
      const key = `${b.tenantId}|${start}`;
      let up = into.get(key);
      if (!up) into.set(key, (up = newBucket(b.tenantId, start)));
      up.samples += b.samples;
      up.errors += b.errors;
      up.durationSum += b.durationSum;
      mergeInto(up.sketch, b.sketch);
      for (const id of b.userIds) up.userIds.add(id);
    }
  };
  rollUp(agg.minutes.values(), agg.hours, HOUR);
  rollUp(agg.hours.values(), agg.days, DAY);
  const hashes = new Map<string, number>();
  const hashOf = (id: string) => {
    let h = hashes.get(id);
    if (h === undefined) hashes.set(id, (h = hashUserId(id)));
    return h;
  };
  for (const level of [agg.hours, agg.days]) {
    for (const b of level.values()) b.users = addHashes(emptyDistinct(), [...b.userIds].map(hashOf));
  }
  return agg;
}

const existingBucket = z.object({
  tenant_id: z.string(),
  start: z.string(),
  samples: z.number(),
  errors: z.number(),
  duration_sum_ms: z.number(),
  sketch: z.string(),
  users: z.string().nullable(),
});

/**
 * Adds buckets into a minute, hour or day table, merging sketches with the stored ones (and
 * the distinct-user sketches where the table has them: hours and days).
 */
async function upsertBuckets(
  tx: DatabaseTransactionConnection,
  table: IdentifierSqlToken,
  column: IdentifierSqlToken,
  buckets: Iterable<Bucket>,
  withUsers = false,
) {
  const list = [...buckets];
  if (list.length === 0) return;
  const existing = await tx.any(sql.type(existingBucket)`
    select t.tenant_id::text, t.${column} as start, t.samples, t.errors, t.duration_sum_ms, encode(t.latency_sketch, 'hex') as sketch,
           ${withUsers ? sql.fragment`encode(t.users_sketch, 'hex')` : sql.fragment`null::text`} as users
    from ${table} t
    join ${sql.unnest(
      list.map((b) => [b.tenantId, pgIso(b.start)]),
      ['uuid', 'timestamptz'],
    )} as k(tenant_id, start)
      on t.tenant_id = k.tenant_id and t.${column} = k.start
    for update of t
  `);
  const stored = new Map(existing.map((row) => [`${row.tenant_id}|${Date.parse(row.start)}`, row]));
  const rows = list.map((b) => {
    const old = stored.get(`${b.tenantId}|${b.start}`);
    const sketch = old ? mergeInto(deserializeSketch(Buffer.from(old.sketch, 'hex')), b.sketch) : b.sketch;
    const fresh = b.users ?? emptyDistinct();
    const users = old?.users ? mergeDistinct(deserializeDistinct(Buffer.from(old.users, 'hex')), fresh) : fresh;
    return [
      b.tenantId,
      pgIso(b.start),
      b.samples + (old?.samples ?? 0),
      b.errors + (old?.errors ?? 0),
      b.durationSum + (old?.duration_sum_ms ?? 0),
      serializeSketch(sketch).toString('hex'),
      withUsers ? serializeDistinct(users).toString('hex') : null,
      // The bucket's own distinct count, so a series whose window is exactly one bucket (dau
      // at daily points) reads a number instead of the sketch.
      withUsers ? countDistinct(users) : null,
    ];
  });
  await tx.query(sql.type(ignoredRows)`
    insert into ${table} (tenant_id, ${column}, samples, errors, duration_sum_ms, latency_sketch${withUsers ? sql.fragment`, users_sketch, users` : sql.fragment``})
    select tenant_id, start, samples, errors, duration_sum_ms, decode(sketch, 'hex')${withUsers ? sql.fragment`, decode(users, 'hex'), user_count` : sql.fragment``}
    from ${sql.unnest(rows, ['uuid', 'timestamptz', 'int8', 'int8', 'float8', 'text', 'text', 'int4'])}
      as r(tenant_id, start, samples, errors, duration_sum_ms, sketch, users, user_count)
    on conflict (tenant_id, ${column}) do update set
      samples = excluded.samples, errors = excluded.errors,
      duration_sum_ms = excluded.duration_sum_ms, latency_sketch = excluded.latency_sketch
      ${withUsers ? sql.fragment`, users_sketch = excluded.users_sketch, users = excluded.users` : sql.fragment``}
  `);
}

/**
 * Writes a batch's aggregate into the rollups. Row locks (`for update`) plus a per-tenant
 * advisory lock serialise writers of the same tenant, so read-merge-write of sketches never
 * loses an update even if two partitions carried samples of one tenant (e.g. while the
 * partition count changes).
 */
export async function applySamples(tx: DatabaseTransactionConnection, samples: readonly UsageSample[]): Promise<void> {
  if (samples.length === 0) return;
  const agg = aggregateSamples(samples);
  const tenants = [...agg.tenants.keys()].sort();
  await tx.query(sql.type(ignoredRows)`
    select pg_advisory_xact_lock(hashtext('kpi-usage:' || t)) from unnest(${sql.array(tenants, 'text')}::text[]) as t
  `);
  await upsertBuckets(tx, sql.identifier(['kpi_usage_minutes']), sql.identifier(['minute']), agg.minutes.values());
  await upsertBuckets(tx, sql.identifier(['kpi_usage_hours']), sql.identifier(['hour']), agg.hours.values(), true);
  await upsertBuckets(tx, sql.identifier(['kpi_usage_days']), sql.identifier(['day']), agg.days.values(), true);
  const users = [...agg.users.values()];
  await tx.query(sql.type(ignoredRows)`
    insert into kpi_user_activity (tenant_id, user_id, first_seen, last_seen)
    select * from ${sql.unnest(
      users.map((u) => [u.tenantId, u.userId, pgIso(u.first), pgIso(u.last)]),
      ['uuid', 'text', 'timestamptz', 'timestamptz'],
    )}
    on conflict (tenant_id, user_id) do update set
      first_seen = least(kpi_user_activity.first_seen, excluded.first_seen),
      last_seen = greatest(kpi_user_activity.last_seen, excluded.last_seen)
  `);
  const daily = [...agg.dailyUsers.values()];
  await tx.query(sql.type(ignoredRows)`
    insert into kpi_daily_users (tenant_id, day, user_id, samples)
    select * from ${sql.unnest(
      daily.map((d) => [d.tenantId, d.day, d.userId, d.samples]),
      ['uuid', 'date', 'text', 'int8'],
    )}
    on conflict (tenant_id, day, user_id) do update set samples = kpi_daily_users.samples + excluded.samples
  `);
  await tx.query(sql.type(ignoredRows)`
    insert into kpi_tenant_usage (tenant_id, samples, last_sample_at)
    select * from ${sql.unnest(
      tenants.map((t) => [t, agg.tenants.get(t)!.samples, pgIso(agg.tenants.get(t)!.last)]),
      ['uuid', 'int8', 'timestamptz'],
    )}
    on conflict (tenant_id) do update set
      samples = kpi_tenant_usage.samples + excluded.samples,
      last_sample_at = greatest(kpi_tenant_usage.last_sample_at, excluded.last_sample_at)
  `);
}

const offsetRow = z.object({ partition: z.number(), next_offset: z.string() });
const nextOffsetRow = z.object({ next_offset: z.string() });

export type UsageRollupSinkOptions = {
  /** The consumer group: offsets are stored per (group, topic, partition). */
  readonly group: string;
  readonly onSkipped?: (info: { topic: string; partition: number; reason: string; offset: string }) => void;
};

/**
 * The KPI projector's sink. Each Kafka batch is applied in ONE transaction with its offset:
 * the stored offset row is locked, messages before it are dropped (already applied: a replay
 * after a crash or rebalance), a batch that starts after it is refused with `seek` (samples
 * would be lost), and the rollups and the new offset commit together. So a SIGKILL at any
 * instant, or two consumers briefly owning one partition, never double-counts or loses a sample.
 */
export function createUsageRollupSink(
  pool: DatabasePool,
  options: UsageRollupSinkOptions,
): UsageSampleSink & {
  readonly applied: () => number;
} {
  let applied = 0;
  // Partitions we already asked to seek back to a stored offset, and to which offset. If the
  // broker answers from a later offset again, the log start moved past it (retention): accept.
  const seekRequested = new Map<string, string>();

  return {
    applied: () => applied,

    async storedOffsets(topic, partitions) {
      const rows = await pool.any(sql.type(offsetRow)`
        select partition, next_offset::text from kpi_kafka_offsets
        where consumer_group = ${options.group} and topic = ${topic} and partition = any(${sql.array([...partitions], 'int4')})
      `);
      return new Map(rows.map((r) => [r.partition, r.next_offset]));
    },

    async apply(batch: SampleBatch): Promise<ApplyOutcome> {
      const origin = batch.origin;
      if (!origin) {
        await pool.transaction((tx) => applySamples(tx, batch.samples));
        applied += batch.samples.length;
        return { kind: 'applied' };
      }
      const key = `${origin.topic}:${origin.partition}`;
      const outcome = await pool.transaction(async (tx): Promise<ApplyOutcome & { count?: number }> => {
        const stored = await tx.maybeOneFirst(sql.type(nextOffsetRow)`
          select next_offset::text from kpi_kafka_offsets
          where consumer_group = ${options.group} and topic = ${origin.topic} and partition = ${origin.partition}
          for update
        `);
        const first = BigInt(origin.firstOffset);
        const next = BigInt(origin.nextOffset);
        let from = first;
        if (stored !== null) {
          const resume = BigInt(stored);
          if (next <= resume) return { kind: 'applied', count: 0 }; // all already applied
          if (first > resume) {
            if (seekRequested.get(key) !== stored) {
              seekRequested.set(key, stored);
              return { kind: 'seek', offset: stored };
            }
            options.onSkipped?.({
              topic: origin.topic,
              partition: origin.partition,
              reason: 'log start moved past stored offset',
              offset: stored,
            });
          }
          if (resume > from) from = resume;
        }
        seekRequested.delete(key);
        const offsets = origin.offsets;
        const fresh = from === first ? batch.samples : batch.samples.filter((_, i) => BigInt(offsets[i] ?? '-1') >= from);
        await applySamples(tx, fresh);
        let newest: number | null = null;
        for (const sample of fresh) if (newest === null || sample.timestamp > newest) newest = sample.timestamp;
        const appliedUntil = newest === null ? null : pgIso(newest);
        await tx.query(sql.type(ignoredRows)`
          insert into kpi_kafka_offsets (consumer_group, topic, partition, next_offset, samples_applied, applied_until, updated_at)
          values (${options.group}, ${origin.topic}, ${origin.partition}, ${origin.nextOffset}, ${fresh.length}, ${appliedUntil}, now())
          on conflict (consumer_group, topic, partition) do update set
            next_offset = excluded.next_offset,
            samples_applied = kpi_kafka_offsets.samples_applied + excluded.samples_applied,
            applied_until = greatest(kpi_kafka_offsets.applied_until, excluded.applied_until),
            updated_at = now()
        `);
        return { kind: 'applied', count: fresh.length };
      });
      applied += outcome.count ?? 0;
      return outcome.kind === 'seek' ? { kind: 'seek', offset: outcome.offset } : { kind: 'applied' };
    },
  };
}
