import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UsageSample } from '../../../shared/metrics-bus/port.ts';
import { createUsageRollupSink } from '../../../projections/kpi/usageRollup.ts';
import { analyticsRoutes } from '../../../services/analytics/routes.ts';
import { authHeaders, createTestApp, provisionTenant } from '../../support/auth.ts';
import { createAnalyticsHarness, type AnalyticsHarness, type Kpi } from '../../support/harness/analytics.ts';

/**
 * The open bucket of a KPI series: the gateway's clock is fixed at NOW (inside an hour, a day, a
 * week and a month), so the summary and the series are answered at the same instant.
 */
const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
const NOW = Date.UTC(2026, 9, 14, 10, 37, 12, 345); // Wednesday 14 October 2026, 10:37:12.345
const iso = (ms: number) => new Date(ms).toISOString();

type Point = { at: string; value: number; partial?: boolean };
type Series = { metric: string; interval: string; asOf: string; points: Point[] };

let harness: AnalyticsHarness | undefined;
let app: FastifyInstance;
let analyst: Record<string, string>;

/** Who called when: u1 three times in NOW's hour, u2 twice two hours before, u3 on Sunday, u4 twenty days ago. */
function usage(tenantId: string): UsageSample[] {
  const at = (userId: string, timestamp: number, durationMs: number) => ({
    tenantId,
    userId,
    route: '/v1/employees',
    method: 'GET',
    status: 200,
    durationMs,
    timestamp,
  });
  return [
    at('u1', NOW - 10 * MINUTE, 300),
    at('u1', NOW - 10 * MINUTE, 310),
    at('u1', NOW - 5_000, 320), // in NOW's own minute, before NOW
    at('u2', NOW - 2 * HOUR, 40),
    at('u2', NOW - 2 * HOUR, 50),
    at('u3', NOW - 3 * DAY, 60),
    at('u4', NOW - 20 * DAY, 70),
  ];
}

beforeAll(async () => {
  harness = await createAnalyticsHarness();
  const { db, auth } = harness;
  const tenant = await provisionTenant(db.pool);
  await createUsageRollupSink(db.pool, { group: `g-${randomUUID()}` }).apply({ origin: null, samples: usage(tenant.tenantId) });
  // c1 since October 1st; c2 from 10:05 today, inside NOW's hour: the open bucket has it, 10:00 not.
  const events = [
    { customerId: 'c1', type: 'subscription.started', amount: '100', interval: 'month', occurredAt: iso(Date.UTC(2026, 9, 1)) },
    { customerId: 'c2', type: 'subscription.started', amount: '50', interval: 'month', occurredAt: iso(NOW - 32 * MINUTE) },
  ].map((e) => ({ eventId: randomUUID(), currency: 'EUR', ...e }));
  const admin = await authHeaders(auth, tenant, 'admin');
  const ingest = await harness.app.inject({ method: 'POST', url: '/v1/analytics/billing-events', headers: admin, payload: { events } });
  expect(ingest.statusCode).toBe(202);
  const position = ingest.json<{ position: string }>().position;
  expect((await harness.app.inject({ url: '/v1/analytics/kpi', headers: { ...admin, 'x-min-position': position } })).statusCode).toBe(200);
  app = await createTestApp(auth, analyticsRoutes({ pool: db.pool, store: harness.store, now: () => NOW }));
  analyst = await authHeaders(auth, tenant, 'analyst');
});

afterAll(async () => {
  await app?.close();
  await harness?.close();
});

async function series(metric: string, from: number, to: number, interval: string): Promise<Series> {
  const response = await app.inject({
    url: '/v1/analytics/kpi/series',
    query: { metric, from: iso(from), to: iso(to), interval },
    headers: analyst,
  });
  expect(response.statusCode, response.body).toBe(200);
  return response.json<Series>();
}

async function kpi(query: Record<string, string> = {}): Promise<Kpi> {
  const response = await app.inject({ url: '/v1/analytics/kpi', query, headers: analyst });
  expect(response.statusCode, response.body).toBe(200);
  return response.json<Kpi>();
}

const METRICS = ['mrr', 'arr', 'churnRate', 'dau', 'mau', 'apiLatencyP95Ms'] as const;

describe('GET /v1/analytics/kpi/series: the bucket still open', () => {
  describe('when the range reaches now', () => {
    it('ends with a partial point at asOf that equals the summary at that instant, on every metric', async () => {
      const summary = await kpi();
      expect(summary.asOf).toBe(iso(NOW));
      expect(summary).toMatchObject({ mrr: 150, dau: 2, mau: 4 });
      for (const metric of METRICS) {
        for (const interval of ['hour', 'day']) {
          const answer = await series(metric, NOW - 6 * HOUR, NOW + HOUR, interval);
          const last = answer.points.at(-1)!;
          expect(answer.asOf).toBe(iso(NOW));
          expect(last, `${metric} ${interval}`).toEqual({ at: iso(NOW), value: summary[metric], partial: true });
          for (const closed of answer.points.slice(0, -1)) expect(closed, `${metric} ${interval}`).not.toHaveProperty('partial');
        }
      }
      // `kpi?at=` at the open point's instant is the same summary.
      expect(await kpi({ at: iso(NOW) })).toEqual(summary);
    });

    it('holds what happened so far, not the closed bucket before it', async () => {
      const [dau, mrr] = [await series('dau', NOW - 2 * HOUR, NOW + HOUR, 'hour'), await series('mrr', NOW - 2 * HOUR, NOW + HOUR, 'hour')];
      // 10:00: only u2 (08:37) in the 24 h before; c2 started at 10:05.
      expect(dau.points).toEqual([
        { at: iso(Date.UTC(2026, 9, 14, 9)), value: 1 },
        { at: iso(Date.UTC(2026, 9, 14, 10)), value: 1 },
        { at: iso(NOW), value: 2, partial: true },
      ]);
      expect(mrr.points.map((p) => p.value)).toEqual([100, 100, 150]);
      const p95 = await series('apiLatencyP95Ms', NOW - HOUR, NOW + HOUR, 'hour');
      expect(p95.points.at(-1)!.value).toBeGreaterThan(p95.points.at(-2)!.value); // u1's 300–320 ms are in it
    });

    it('counts the requests of the open bucket so far, for every interval', async () => {
      // [10:00, NOW]: u1 ×3; the day adds u2 ×2; the week (from Monday 12th) the same; the month adds u3 on the 11th.
      const expected = { hour: 3, day: 5, week: 5, month: 6 };
      for (const [interval, count] of Object.entries(expected)) {
        const answer = await series('requests', NOW - (interval === 'hour' ? 6 * HOUR : 40 * DAY), NOW + 31 * DAY, interval);
        expect(answer.points.at(-1), interval).toEqual({ at: iso(NOW), value: count, partial: true });
      }
    });

    it('answers only the open point for a range inside the current bucket', async () => {
      const answer = await series('requests', NOW - 20 * MINUTE, NOW + 20 * MINUTE, 'hour');
      expect(answer.points).toEqual([{ at: iso(NOW), value: 3, partial: true }]);
    });
  });

  describe('when the range ends in the past', () => {
    it('has no partial point: every bucket is closed', async () => {
      for (const to of [Date.UTC(2026, 9, 14, 10), NOW - 10 * MINUTE, NOW - 1]) {
        for (const metric of [...METRICS, 'requests']) {
          const answer = await series(metric, NOW - 6 * HOUR, to, 'hour');
          expect(answer.points.length, `${metric} to ${iso(to)}`).toBe(6); // 05:00 … 10:00
          for (const point of answer.points) expect(point, `${metric} to ${iso(to)}`).not.toHaveProperty('partial');
          expect(answer.points.at(-1)!.at).toBe(iso(Date.UTC(2026, 9, 14, 10)));
        }
      }
    });

    it('keeps kpi?at= inside the hour at hour resolution: as it was, nothing after it', async () => {
      const at = await kpi({ at: iso(NOW - 1) });
      expect(at.asOf).toBe(iso(NOW - 1));
      expect(at.dau).toBe(1); // u1's requests of this hour are not counted before the hour closes
    });
  });

  describe('when the open bucket would be the 1,001st point', () => {
    it('refuses the range (400): the open bucket counts in the 1,000', async () => {
      const from = Date.UTC(2026, 9, 14, 10) - 999 * HOUR; // 1,000 boundaries up to 10:00, plus the open bucket
      const response = await app.inject({
        url: '/v1/analytics/kpi/series',
        query: { metric: 'dau', from: iso(from), to: iso(NOW + 5 * MINUTE), interval: 'hour' },
        headers: analyst,
      });
      expect(response.statusCode, response.body).toBe(400);
      const fits = await series('dau', from + HOUR, NOW + 5 * MINUTE, 'hour');
      expect(fits.points).toHaveLength(1_000);
      expect(fits.points.at(-1)).toMatchObject({ at: iso(NOW), partial: true });
    });
  });

  describe('when a past range has exactly 1,000 boundaries and a `to` between two', () => {
    it('answers the 1,000 closed points: the bucket `to` falls in is closed, so no open point joins them', async () => {
      const lastBoundary = Date.UTC(2026, 9, 14, 9); // the hour before NOW's
      const from = lastBoundary - 999 * HOUR;
      const answer = await series('dau', from, lastBoundary + 30 * MINUTE, 'hour');
      expect(answer.points).toHaveLength(1_000);
      expect(answer.points.at(-1)).toEqual({ at: iso(lastBoundary), value: 1 }); // u2, 08:37
    });
  });

  describe('when a client reads the OpenAPI document', () => {
    it('finds the partial flag on the series point', async () => {
      const doc = (await app.inject({ url: '/v1/openapi.json' })).json<{ components: { schemas: Record<string, unknown> } }>();
      expect(doc.components.schemas.SeriesPoint).toMatchObject({ properties: { partial: { const: true } } });
    });
  });
});
