import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql } from '../../../shared/db/pool.ts';
import type { SampleBatch, UsageSample } from '../../../shared/metrics-bus/port.ts';
import { addValue, createSketch, quantile, serializeSketch } from '../../../shared/sketch/ddsketch.ts';
import { createKpiRollupJob } from '../../../projections/kpi/retention.ts';
import { createUsageRollupSink } from '../../../projections/kpi/usageRollup.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

/** A Kafka-like batch: one sample per offset in [from, to). */
function batch(tenantId: string, from: number, to: number, partition = 0): SampleBatch {
  const samples: UsageSample[] = [];
  const offsets: string[] = [];
  for (let o = from; o < to; o++) {
    samples.push({
      tenantId,
      userId: `u${o % 3}`,
      route: '/r',
      method: 'GET',
      status: 200,
      durationMs: 10,
      timestamp: 1_763_769_600_000 + o * 1_000,
    });
    offsets.push(String(o));
  }
  return { origin: { topic: 'usage', partition, firstOffset: String(from), nextOffset: String(to), offsets }, samples };
}

const tenantSamples = (tenantId: string) =>
  db.pool.maybeOneFirst(sql.type(z.object({ samples: z.number() }))`select samples from kpi_tenant_usage where tenant_id = ${tenantId}`);

describe('usage rollup sink (offsets stored with the rollups)', () => {
  describe('when Kafka redelivers what was already applied', () => {
    it('applies each offset once: a replayed batch is a no-op, an overlapping one adds only the new part', async () => {
      const tenant = randomUUID();
      const sink = createUsageRollupSink(db.pool, { group: `g-${randomUUID()}` });
      expect(await sink.apply(batch(tenant, 0, 10))).toEqual({ kind: 'applied' });
      expect(await sink.apply(batch(tenant, 0, 10))).toEqual({ kind: 'applied' });
      expect(await tenantSamples(tenant)).toBe(10);
      await sink.apply(batch(tenant, 5, 15));
      expect(await tenantSamples(tenant)).toBe(15);
      expect(await sink.storedOffsets('usage', [0, 1])).toEqual(new Map([[0, '15']]));
    });
  });

  describe('when samples lie at the edges of the instants the codec lets through', () => {
    it('applies the epoch and the last millisecond of year 9999 into every rollup', async () => {
      const tenant = randomUUID();
      const sink = createUsageRollupSink(db.pool, { group: `g-${randomUUID()}` });
      const edges = batch(tenant, 0, 2);
      const samples = [0, Date.UTC(9999, 11, 31, 23, 59, 59, 999)].map((timestamp, i) => ({ ...edges.samples[i]!, timestamp }));
      expect(await sink.apply({ ...edges, samples })).toEqual({ kind: 'applied' });
      expect(await tenantSamples(tenant)).toBe(2);
      const days = await db.pool.anyFirst(
        sql.type(z.object({ day: z.string() }))`select day::text from kpi_daily_users where tenant_id = ${tenant} order by day`,
      );
      expect(days).toEqual(['1970-01-01', '9999-12-31']);
    });
  });

  describe('when a batch starts after the stored offset', () => {
    it('refuses it with a seek to the stored offset (no sample lost), and applies the batch that follows', async () => {
      const tenant = randomUUID();
      const sink = createUsageRollupSink(db.pool, { group: `g-${randomUUID()}` });
      await sink.apply(batch(tenant, 0, 10));
      expect(await sink.apply(batch(tenant, 20, 25))).toEqual({ kind: 'seek', offset: '10' });
      expect(await tenantSamples(tenant)).toBe(10);
      await sink.apply(batch(tenant, 10, 25));
      expect(await tenantSamples(tenant)).toBe(25);
    });

    it('accepts the gap when the broker answers from the later offset again (log start moved: retention)', async () => {
      const tenant = randomUUID();
      const skipped: string[] = [];
      const sink = createUsageRollupSink(db.pool, { group: `g-${randomUUID()}`, onSkipped: (info) => skipped.push(info.offset) });
      await sink.apply(batch(tenant, 0, 10));
      expect((await sink.apply(batch(tenant, 20, 25))).kind).toBe('seek');
      expect((await sink.apply(batch(tenant, 20, 25))).kind).toBe('applied');
      expect(skipped).toEqual(['10']);
      expect(await tenantSamples(tenant)).toBe(15);
    });
  });

  describe('when two consumers race on one partition', () => {
    it('never double-counts (the offset row lock serialises them)', async () => {
      const tenant = randomUUID();
      const group = `g-${randomUUID()}`;
      const [a, b] = [createUsageRollupSink(db.pool, { group }), createUsageRollupSink(db.pool, { group })];
      await a.apply(batch(tenant, 0, 1));
      const outcomes = await Promise.all([a.apply(batch(tenant, 1, 50)), b.apply(batch(tenant, 1, 50)), b.apply(batch(tenant, 1, 50))]);
      expect(outcomes.every((o) => o.kind === 'applied')).toBe(true);
      expect(await tenantSamples(tenant)).toBe(50);
      const minutes = await db.pool.oneFirst(sql.type(z.object({ n: z.number() }))`
        select sum(samples)::int8 as n from kpi_usage_minutes where tenant_id = ${tenant}
      `);
      expect(minutes).toBe(50);
    });
  });
});

describe('scheduled KPI rollup job', () => {
  it('drops per-minute rows older than the retention and keeps their hours', async () => {
    const tenant = randomUUID();
    const sink = createUsageRollupSink(db.pool, { group: `g-${randomUUID()}` });
    await sink.apply(batch(tenant, 0, 120)); // 2 minutes of samples, one per second
    const count = (table: 'kpi_usage_minutes' | 'kpi_usage_hours') =>
      db.pool.oneFirst(
        sql.type(z.object({ n: z.number() }))`select count(*) as n from ${sql.identifier([table])} where tenant_id = ${tenant}`,
      );
    expect(await count('kpi_usage_minutes')).toBe(2);
    const job = createKpiRollupJob(db.pool, { minuteRetentionHours: 1 });
    await job(new Date(1_763_769_600_000 + 30 * 60_000)); // 30 min later: kept
    expect(await count('kpi_usage_minutes')).toBe(2);
    await job(new Date(1_763_769_600_000 + 3 * 3_600_000)); // 3 h later: gone
    expect(await count('kpi_usage_minutes')).toBe(0);
    expect(await count('kpi_usage_hours')).toBe(1);
  });
});

describe('kpi_sketch_quantile (SQL, for analysts)', () => {
  it('answers the same quantiles as the TypeScript sketch (within float rounding; no min/max clamp)', async () => {
    const sketch = createSketch();
    for (let i = 0; i < 20_000; i++) addValue(sketch, Math.exp(Math.log(20) + Math.sin(i) * 2) + (i % 5 === 0 ? 0 : 0.5));
    addValue(sketch, 0, 50);
    const hex = serializeSketch(sketch).toString('hex');
    for (const q of [0, 0.001, 0.5, 0.95, 0.99]) {
      const fromSql = await db.pool.oneFirst(sql.type(z.object({ v: z.number().nullable() }))`
        select kpi_sketch_quantile(decode(${hex}, 'hex'), ${q}) as v
      `);
      const expected = quantile(sketch, q)!;
      if (expected === 0) expect(fromSql).toBe(0);
      else expect(Math.abs(fromSql! - expected) / expected).toBeLessThan(0.006); // ≤ α where TS clamps to min/max
    }
  });
});
