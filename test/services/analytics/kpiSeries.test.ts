import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UsageSample } from '../../../shared/metrics-bus/port.ts';
import { createUsageRollupSink } from '../../../projections/kpi/usageRollup.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import type { TestDatabase } from '../../support/database.ts';
import { authHeaders, provisionTenant, type TestTenant } from '../../support/auth.ts';
import { createAnalyticsHarness, type AnalyticsHarness, type Kpi } from '../../support/harness/analytics.ts';

let db: TestDatabase;
let auth: AuthDeps;
let app: FastifyInstance;
let harness: AnalyticsHarness | undefined;

beforeAll(async () => {
  harness = await createAnalyticsHarness();
  ({ db, auth, app } = harness);
});

afterAll(async () => {
  await harness?.close();
});

type Series = { metric: string; interval: string; currency?: string | null; asOf: string; points: { at: string; value: number }[] };

const DAY = 86_400_000;
const OCT1 = Date.UTC(2026, 9, 1); // a Thursday
const day = (d: number, hour = 0) => new Date(OCT1 + d * DAY + hour * 3_600_000).toISOString();

/**
 * Usage vector: on day d (Oct 1 + d, d = 0..9) users u_d … u_{d+n−1} with n = 2 (even d) or
 * 3 (odd d) make 10 requests each, at 12:00 + i minutes, lasting 10·k + i ms for user u_k.
 * So a day's durations are exactly 10d … 10d + 10n − 1.
 */
function usageVector(tenantId: string): UsageSample[] {
  const samples: UsageSample[] = [];
  for (let d = 0; d < 10; d++) {
    const n = d % 2 === 0 ? 2 : 3;
    for (let k = d; k < d + n; k++) {
      for (let i = 0; i < 10; i++) {
        samples.push({
          tenantId,
          userId: `u${k}`,
          route: '/v1/employees',
          method: 'GET',
          status: 200,
          durationMs: 10 * k + i,
          timestamp: OCT1 + d * DAY + 12 * 3_600_000 + i * 60_000,
        });
      }
    }
  }
  return samples;
}

/** Billing vector over a month, in occurredAt order (all at 12:00 UTC). */
const billingVector = () =>
  [
    { customerId: 'c1', type: 'subscription.started', amount: '100', interval: 'month', occurredAt: day(0, 12) },
    { customerId: 'c2', type: 'subscription.started', amount: '1200', interval: 'year', occurredAt: day(0, 12) },
    { customerId: 'c3', type: 'subscription.started', amount: '50', interval: 'month', occurredAt: day(4, 12) },
    { customerId: 'c1', type: 'subscription.changed', amount: '150', interval: 'month', occurredAt: day(9, 12) },
    { customerId: 'c2', type: 'subscription.cancelled', amount: '1200', interval: 'year', occurredAt: day(14, 12) },
    { customerId: 'c4', type: 'subscription.started', amount: '30', interval: 'month', occurredAt: day(19, 12) },
    { customerId: 'c3', type: 'subscription.cancelled', amount: '50', interval: 'month', occurredAt: day(24, 12) },
  ].map((e) => ({ eventId: randomUUID(), currency: 'EUR', ...e }));

let tenant: TestTenant;
let analyst: Record<string, string>;

beforeAll(async () => {
  tenant = await provisionTenant(db.pool);
  await createUsageRollupSink(db.pool, { group: `g-${randomUUID()}` }).apply({ origin: null, samples: usageVector(tenant.tenantId) });
  const admin = await authHeaders(auth, tenant, 'admin');
  const ingest = await app.inject({
    method: 'POST',
    url: '/v1/analytics/billing-events',
    headers: admin,
    payload: { events: billingVector() },
  });
  expect(ingest.statusCode).toBe(202);
  const position = ingest.json<{ position: string }>().position;
  const ready = await app.inject({ method: 'GET', url: '/v1/analytics/kpi', headers: { ...admin, 'x-min-position': position } });
  expect(ready.statusCode).toBe(200);
  analyst = await authHeaders(auth, tenant, 'analyst');
});

async function series(metric: string, from: string, to: string, interval: string): Promise<Series> {
  const response = await app.inject({
    method: 'GET',
    url: '/v1/analytics/kpi/series',
    query: { metric, from, to, interval },
    headers: analyst,
  });
  expect(response.statusCode, response.body).toBe(200);
  return response.json<Series>();
}
const values = (s: Series) => Object.fromEntries(s.points.map((p) => [p.at, p.value]));
const kpiAt = async (at: string) => {
  const response = await app.inject({ method: 'GET', url: '/v1/analytics/kpi', query: { at }, headers: analyst });
  expect(response.statusCode, response.body).toBe(200);
  return response.json<Kpi>();
};

describe('GET /v1/analytics/kpi/series', () => {
  describe('when a month of billing events was recorded (hand-computed MRR / ARR / churn)', () => {
    it('answers MRR, ARR and subscriber churn as of each daily point', async () => {
      const mrr = values(await series('mrr', day(0), day(50), 'day'));
      const arr = values(await series('arr', day(0), day(50), 'day'));
      const churn = values(await series('churnRate', day(0), day(50), 'day'));
      // c1 100/mo + c2 1200/yr (= 100/mo) on Oct 1; c3 +50 Oct 5; c1 → 150 Oct 10; c2 ends Oct 15; c4 +30 Oct 20; c3 ends Oct 25.
      const expected: [number, number, number][] = [
        [0, 0, 0],
        [1, 200, 0],
        [5, 250, 0],
        [10, 300, 0],
        [15, 200, 1 / 3], // new in window: c1, c2, c3; churned: c2
        [20, 230, 1 / 4], // + c4
        [25, 180, 2 / 4], // c3 churned too
        [31, 180, 2 / 4], // window (Oct 2, Nov 1]: active at start c1, c2; new c3, c4; churned c2, c3
        [36, 180, 2 / 4], // (Oct 7, Nov 6]: active at start c1, c2, c3; new c4; churned c2, c3
        [46, 180, 1 / 3], // (Oct 17, Nov 16]: active at start c1, c3; new c4; churned c3
      ];
      for (const [d, m, c] of expected) {
        expect(mrr[day(d)], `mrr ${day(d)}`).toBe(m);
        expect(arr[day(d)], `arr ${day(d)}`).toBe(12 * m);
        expect(churn[day(d)], `churn ${day(d)}`).toBeCloseTo(c, 10);
      }
    });

    it('carries the currency on money metrics', async () => {
      expect((await series('mrr', day(0), day(3), 'day')).currency).toBe('EUR');
    });
  });

  describe('when usage was generated over ten days (hand-computed dau / mau / p95 / requests)', () => {
    it('answers dau, mau, p95 and requests at daily points', async () => {
      const dau = values(await series('dau', day(0), day(12), 'day'));
      const mau = values(await series('mau', day(0), day(12), 'day'));
      const p95 = values(await series('apiLatencyP95Ms', day(0), day(12), 'day'));
      const requests = values(await series('requests', day(0), day(12), 'day'));
      for (let d = 0; d < 10; d++) {
        const n = d % 2 === 0 ? 2 : 3;
        expect(dau[day(d + 1)]).toBe(n);
        expect(requests[day(d + 1)]).toBe(10 * n);
        // Durations of day d are 10d … 10d + 10n − 1; p95 is the value of rank ⌊0.95 · (10n − 1)⌋ (DDSketch, ±0.5 %).
        const exact = 10 * d + Math.floor(0.95 * (10 * n - 1));
        expect(Math.abs(p95[day(d + 1)]! - exact) / exact).toBeLessThanOrEqual(0.01);
      }
      expect(dau[day(0)]).toBe(0);
      expect(dau[day(11)]).toBe(0);
      expect(mau[day(4)]).toBe(6); // u0 … u5
      expect(mau[day(10)]).toBe(12); // u0 … u11
      expect(mau[day(12)]).toBe(12);
      expect(p95[day(11)]).toBe(0);
    });

    it('answers hourly points at hour resolution (rolling 24 h)', async () => {
      const dau = values(await series('dau', day(1, 11), day(1, 14), 'hour'));
      const requests = values(await series('requests', day(1, 11), day(1, 14), 'hour'));
      expect(dau).toEqual({ [day(1, 11)]: 2, [day(1, 12)]: 2, [day(1, 13)]: 3, [day(1, 14)]: 3 });
      expect(requests).toEqual({ [day(1, 11)]: 0, [day(1, 12)]: 0, [day(1, 13)]: 30, [day(1, 14)]: 0 });
    });

    it('answers weekly (ISO weeks, Monday) and monthly points', async () => {
      const weekly = values(await series('requests', day(0), day(14), 'week'));
      expect(weekly).toEqual({ [day(4)]: 100, [day(11)]: 150 }); // Oct 5: Oct 1–4; Oct 12: Oct 5–10
      const monthly = values(await series('requests', day(0), day(31), 'month'));
      expect(monthly).toEqual({ [day(0)]: 0, [day(31)]: 250 });
    });
  });

  describe('when asked for an instant inside an hour', () => {
    it('counts no usage after it: the usage windows end at the hour before (the series point there), revenue is exact', async () => {
      const at = new Date(Date.parse(day(1, 12)) + 30 * 60_000).toISOString();
      const kpi = await kpiAt(at);
      expect(kpi.asOf).toBe(at);
      // The hour 12:00–13:00 holds a third user's requests (dau 3 at 13:00); up to 12:00, 2.
      const [dau, p95] = [
        values(await series('dau', day(1, 11), day(1, 13), 'hour')),
        values(await series('apiLatencyP95Ms', day(1, 11), day(1, 13), 'hour')),
      ];
      expect(dau[day(1, 13)]).toBe(3);
      expect({ dau: kpi.dau, apiLatencyP95Ms: kpi.apiLatencyP95Ms }).toEqual({ dau: dau[day(1, 12)], apiLatencyP95Ms: p95[day(1, 12)] });
    });
  });

  describe('when compared with the snapshot at the same instants', () => {
    it('agrees with GET /kpi?at= on every metric', async () => {
      const instants = [day(1), day(2, 13), day(5), day(10), day(16), day(26), day(40)];
      const all = Object.fromEntries(
        await Promise.all(
          (['mrr', 'arr', 'churnRate', 'dau', 'mau', 'apiLatencyP95Ms'] as const).map(async (metric) => {
            const [daily, hourly] = [await series(metric, day(0), day(45), 'day'), await series(metric, day(2, 10), day(2, 15), 'hour')];
            return [metric, { ...values(daily), ...values(hourly) }] as const;
          }),
        ),
      );
      for (const at of instants) {
        const kpi = await kpiAt(at);
        expect(kpi.asOf).toBe(at);
        for (const metric of ['mrr', 'arr', 'churnRate', 'dau', 'mau', 'apiLatencyP95Ms'] as const) {
          expect(kpi[metric], `${metric} at ${at}`).toBe(all[metric]![at]);
        }
      }
    });
  });

  describe('when the request is not acceptable', () => {
    it('refuses more than 1,000 points, from after to, unknown metrics and bad instants (400 problems)', async () => {
      for (const query of [
        { metric: 'dau', from: day(0), to: day(42), interval: 'hour' }, // 1,009 points
        { metric: 'dau', from: day(2), to: day(1), interval: 'day' },
        { metric: 'ltv', from: day(0), to: day(1), interval: 'day' },
        { metric: 'dau', from: 'yesterday', to: day(1), interval: 'day' },
        { metric: 'dau', from: day(0), to: day(1), interval: 'minute' },
      ]) {
        const response = await app.inject({ method: 'GET', url: '/v1/analytics/kpi/series', query, headers: analyst });
        expect(response.statusCode, JSON.stringify(query)).toBe(400);
        expect(response.headers['content-type']).toContain('application/problem+json');
      }
      const ok = await app.inject({
        method: 'GET',
        url: '/v1/analytics/kpi/series',
        query: { metric: 'dau', from: day(0), to: day(41, 15), interval: 'hour' },
        headers: analyst,
      });
      expect(ok.json<Series>().points).toHaveLength(1_000);
    });

    it('is refused to the employee role (403)', async () => {
      const response = await app.inject({
        method: 'GET',
        url: '/v1/analytics/kpi/series',
        query: { metric: 'dau', from: day(0), to: day(1), interval: 'day' },
        headers: await authHeaders(auth, tenant, 'employee'),
      });
      expect(response.statusCode).toBe(403);
    });
  });

  describe('when a client reads the OpenAPI document', () => {
    it('finds the series route with its query parameters and response schema, and kpi?at=', async () => {
      const doc = (await app.inject({ url: '/v1/openapi.json' })).json<{
        paths: Record<string, { get: { parameters: { name: string; in: string }[] } }>;
        components: { schemas: Record<string, unknown> };
      }>();
      const series = doc.paths['/v1/analytics/kpi/series']!.get;
      expect(
        series.parameters
          .filter((p) => p.in === 'query')
          .map((p) => p.name)
          .sort(),
      ).toEqual(['from', 'interval', 'metric', 'to']);
      expect(doc.components.schemas).toHaveProperty('KpiSeries');
      expect(doc.paths['/v1/analytics/kpi']!.get.parameters.map((p) => p.name)).toContain('at');
    });
  });
});
