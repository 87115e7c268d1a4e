import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authHeaders } from '../../support/auth.ts';
import { expectProblem } from '../../support/harness/employees.ts';
import { createWorkforceHarness, ok, type WorkforceHarness } from '../../support/harness/workforce.ts';
import { NOW, writeHistory } from '../../support/harness/workforceHistory.ts';

let h: WorkforceHarness;
let analyst: Record<string, string>;
let other: Record<string, string>;

beforeAll(async () => {
  h = await createWorkforceHarness();
  const mine = await h.tenant();
  analyst = mine.analyst;
  await writeHistory(h, mine.hr);
  // Another tenant: one hire in 2025, which no figure of the first tenant may count.
  const theirs = await h.tenant();
  other = theirs.analyst;
  const hired = await h.app.inject({
    method: 'POST',
    url: '/v1/employees',
    headers: theirs.hr,
    payload: { email: 'x@example.test', firstName: 'X', lastName: 'Y', department: 'sales', hiredAt: '2025-06-01T00:00:00Z' },
  });
  expect(hired.statusCode).toBe(201);
  await h.settle(String(hired.headers['x-log-position']));
}, 60_000);
afterAll(async () => {
  await h?.close();
});

type Series = { metric: string; interval: string; department?: string; points: { at: string; value: number; partial?: true }[] };

const series = async (query: string, headers = analyst) =>
  ok<Series>(await h.app.inject({ method: 'GET', url: `/v1/analytics/workforce/series?${query}`, headers }));

const values = async (query: string) => (await series(query)).points.map((p) => p.value);

/** The history of workforceHistory.ts by month (buckets Jan, Feb, Mar and April so far). */
const months = 'interval=month&from=2026-01-01T00:00:00Z&to=2026-12-31T00:00:00Z';

describe('GET /v1/analytics/workforce/series on the hand-computed history', () => {
  it('puts one point per bucket up to now, the open one partial', async () => {
    const body = await series(`metric=headcount&${months}`);
    expect(body).toEqual({
      metric: 'headcount',
      interval: 'month',
      points: [
        { at: '2026-01-01T00:00:00.000Z', value: 2 }, // A, B (F left on 01-31 at 23:00)
        { at: '2026-02-01T00:00:00.000Z', value: 2 }, // B on leave, C (A left on 02-15)
        { at: '2026-03-01T00:00:00.000Z', value: 2 }, // B, D (C left on 03-31)
        { at: '2026-04-01T00:00:00.000Z', value: 3, partial: true }, // B, C back, D; E only hired in May
      ],
    });
  });

  it('counts hires, exits and turnover per bucket', async () => {
    expect(await values(`metric=hires&${months}`)).toEqual([2, 1, 1, 0]);
    expect(await values(`metric=exits&${months}`)).toEqual([1, 1, 1, 0]);
    // exits ÷ average of the headcount at the start (end of the month before) and the end.
    expect(await values(`metric=turnoverRate&${months}`)).toEqual([0.666667, 0.5, 0.5, 0]);
  });

  it('filters by the department in force (B moved from eng to sales on 02-10)', async () => {
    const sales = await series(`metric=headcount&${months}&department=sales`);
    expect(sales.department).toBe('sales');
    expect(sales.points.map((p) => p.value)).toEqual([0, 2, 2, 3]);
    expect(await values(`metric=headcount&${months}&department=eng`)).toEqual([2, 0, 0, 0]);
    expect(await values(`metric=exits&${months}&department=eng`)).toEqual([0, 1, 0, 0]);
    expect(await values(`metric=turnoverRate&${months}&department=eng`)).toEqual([0, 1, 0, 0]);
    expect(await values(`metric=hires&${months}&department=sales`)).toEqual([0, 1, 1, 0]);
  });

  it('answers days and weeks, exits on the day they took effect', async () => {
    const days = 'interval=day&from=2026-01-30T00:00:00Z&to=2026-02-02T00:00:00Z';
    expect(await values(`metric=headcount&${days}`)).toEqual([3, 2, 3, 3]);
    expect(await values(`metric=exits&${days}`)).toEqual([0, 1, 0, 0]);
    expect(await values(`metric=hires&${days}`)).toEqual([0, 0, 1, 0]);
    // ISO weeks: from Monday 2026-03-30 (C leaves on Tuesday 03-31) to the open week of 04-13.
    const weeks = await series('metric=headcount&interval=week&from=2026-03-30T00:00:00Z&to=2026-04-20T00:00:00Z');
    expect(weeks.points).toEqual([
      { at: '2026-03-30T00:00:00.000Z', value: 2 },
      { at: '2026-04-06T00:00:00.000Z', value: 3 },
      { at: '2026-04-13T00:00:00.000Z', value: 3, partial: true },
    ]);
  });

  it('answers a series of the open bucket alone (from today 00:00), read from the versions only', async () => {
    const today = 'interval=day&from=2026-04-15T00:00:00Z&to=2026-04-20T00:00:00Z';
    expect((await series(`metric=headcount&${today}`)).points).toEqual([{ at: '2026-04-15T00:00:00.000Z', value: 3, partial: true }]);
    expect(await values(`metric=hires&${today}`)).toEqual([0]);
    expect(await values(`metric=exits&${today}&department=sales`)).toEqual([0]);
  });

  it("agrees with the summary at now and at a past instant, and never counts another tenant's staff", async () => {
    const summary = (at?: string) =>
      h.app.inject({ method: 'GET', url: `/v1/analytics/workforce${at ? `?at=${encodeURIComponent(at)}` : ''}`, headers: analyst });
    expect(ok(await summary())).toEqual({ headcount: 3, byDepartment: { sales: 3 }, asOf: NOW });
    expect(ok(await summary('2026-02-12T00:00:00Z'))).toEqual({
      headcount: 3,
      byDepartment: { eng: 1, sales: 2 },
      asOf: '2026-02-12T00:00:00.000Z',
    });
    expect(ok(await summary('2026-01-31T23:30:00Z'))).toEqual({
      headcount: 2,
      byDepartment: { eng: 2 },
      asOf: '2026-01-31T23:30:00.000Z',
    });
    expect(ok(await summary('2026-01-15T00:00:00Z'))).toEqual({
      headcount: 3,
      byDepartment: { '': 1, eng: 2 },
      asOf: '2026-01-15T00:00:00.000Z',
    });
    const theirs = await h.app.inject({ method: 'GET', url: '/v1/analytics/workforce/series?metric=headcount&' + months, headers: other });
    expect(ok<Series>(theirs).points.map((p) => p.value)).toEqual([1, 1, 1, 1]);
  });
});

describe('read-your-writes on the workforce reads', () => {
  it('says in X-Consistency whether the read model reached X-Min-Position, and sends none without it', async () => {
    const { hr, analyst: reader } = await h.tenant();
    const hired = await h.app.inject({
      method: 'POST',
      url: '/v1/employees',
      headers: hr,
      payload: { email: 'ryw@example.test', firstName: 'R', lastName: 'W', department: 'ops', hiredAt: '2026-03-02T00:00:00Z' },
    });
    expect(hired.statusCode).toBe(201);
    const position = String(hired.headers['x-log-position']);
    const get = (url: string, headers: Record<string, string>) => h.app.inject({ method: 'GET', url, headers });
    const seriesUrl = `/v1/analytics/workforce/series?metric=hires&${months}`;
    const read = await get(seriesUrl, { ...reader, 'x-min-position': position });
    expect(read.headers['x-consistency']).toBe('consistent');
    expect(ok<Series>(read).points.map((p) => p.value)).toEqual([0, 0, 1, 0]);
    const summary = await get('/v1/analytics/workforce', { ...reader, 'x-min-position': position });
    expect(summary.headers['x-consistency']).toBe('consistent');
    expect(ok<{ headcount: number }>(summary).headcount).toBe(1);
    expect((await get(seriesUrl, reader)).headers['x-consistency']).toBeUndefined();
    expect((await get('/v1/analytics/workforce', reader)).headers['x-consistency']).toBeUndefined();
    // A position the projection does not reach within the wait: the figures it has, flagged stale.
    const stale = await get(seriesUrl, { ...reader, 'x-min-position': '99999999999-99999999999' });
    expect(stale.statusCode).toBe(200);
    expect(stale.headers['x-consistency']).toBe('stale');
  }, 30_000);
});

describe('GET /v1/analytics/workforce/series limits', () => {
  it('refuses more than 1,000 points, an inverted range and an unknown metric with 400', async () => {
    expectProblem(
      await h.app.inject({
        method: 'GET',
        url: '/v1/analytics/workforce/series?metric=headcount&interval=day&from=2020-01-01T00:00:00Z&to=2026-01-01T00:00:00Z',
        headers: analyst,
      }),
      400,
    );
    expect((await series('metric=headcount&interval=day&from=2023-04-21T00:00:00Z&to=2026-01-14T00:00:00Z')).points).toHaveLength(1000);
    expectProblem(
      await h.app.inject({
        method: 'GET',
        url: '/v1/analytics/workforce/series?metric=headcount&interval=day&from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z',
        headers: analyst,
      }),
      400,
    );
    expectProblem(
      await h.app.inject({ method: 'GET', url: `/v1/analytics/workforce/series?metric=salary&${months}`, headers: analyst }),
      400,
    );
  });

  it('refuses a caller without analytics:read with 403', async () => {
    const { tenant } = await h.tenant();
    const employee = await authHeaders(h.auth, tenant, 'employee');
    expectProblem(
      await h.app.inject({ method: 'GET', url: `/v1/analytics/workforce/series?metric=headcount&${months}`, headers: employee }),
      403,
    );
    expectProblem(await h.app.inject({ method: 'GET', url: '/v1/analytics/workforce', headers: employee }), 403);
  });
});
