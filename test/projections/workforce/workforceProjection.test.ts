import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { monotonicFactory } from 'ulid';
import { sql, type DatabasePool } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { START, type EventStore, type GlobalPosition } from '../../../shared/event-store/port.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import { listParkedEvents } from '../../../shared/projections/parking.ts';
import { workforceProjection } from '../../../projections/workforce/workforceProjection.ts';
import { listEmployeesAsOf } from '../../../projections/workforce/asOf.ts';
import { lookForTotalsAgain, readWorkforceAt, readWorkforceSeries, WORKFORCE_METRICS } from '../../../projections/workforce/series.ts';
import { createTenantReader } from '../../../shared/db/tenantReader.ts';
import { floorTo } from '../../../shared/series/intervals.ts';
import { workforceBuckets } from '../../../services/analytics/workforceRoutes.ts';
import { employeeStreamId, type EmployeeEvent, type EmployeeStatus } from '../../../services/employees/contract.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';

let db: TestDatabase;
let store: EventStore;
let projector: ProjectorHandle;
const nextId = monotonicFactory();

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  projector = runProjection(db.pool, store, workforceProjection, { pollIntervalMs: 50 });
  expect(await waitForCheckpoint(db.pool, workforceProjection.name, START, 20_000)).toBe(true);
});
afterAll(async () => {
  await projector?.stop();
  await store?.close();
  await db?.drop();
});

const DAY = 86_400_000;
const T0 = Date.UTC(2024, 0, 1);
const iso = (ms: number) => new Date(ms).toISOString();

/**
 * A small deterministic generator, so a failure can be replayed. It answers from the state's high
 * bits: the low bits of a power-of-two LCG cycle (the lowest alternates), so `s % 2` would repeat
 * one answer whenever the calls between two draws are even in number.
 */
function lcg(seed: number) {
  let s = seed;
  return (n: number) => {
    s = (s * 1_103_515_245 + 12_345) % 2 ** 31;
    return Math.floor(s / 2 ** 15) % n;
  };
}

/**
 * Employees with hires, moves and status changes, the status changes back-dated by up to 40 days
 * (never before the hire or the previous change, as the write side allows), appended one event
 * per call so the projector meets them over many pages, interleaved across employees.
 */
async function givenAHistory(tenantId: string, people: number, seed: number): Promise<GlobalPosition> {
  const random = lcg(seed);
  const plans = Array.from({ length: people }, () => {
    const id = nextId();
    const hiredAt = T0 + random(300) * DAY + random(24) * 3_600_000;
    const events: { event: EmployeeEvent; recordedAt: number }[] = [];
    events.push({
      event: {
        type: 'EmployeeHired',
        data: {
          employeeId: id,
          email: `${id}@x.test`,
          firstName: 'F',
          lastName: 'L',
          department: `d${random(3)}`,
          status: 'active',
          hiredAt: iso(hiredAt),
        },
      },
      recordedAt: hiredAt,
    });
    let clock = hiredAt;
    let status: EmployeeStatus = 'active';
    let since = hiredAt;
    for (let k = random(6); k > 0; k--) {
      clock += (1 + random(60)) * DAY + random(3_600_000);
      if (random(2) === 0) {
        events.push({
          event: { type: 'EmployeeDetailsChanged', data: { employeeId: id, department: `d${random(3)}` } },
          recordedAt: clock,
        });
      } else {
        const to: EmployeeStatus =
          status === 'inactive' ? 'active' : random(2) === 0 ? 'inactive' : status === 'active' ? 'on_leave' : 'active';
        const effective = Math.max(since, clock - random(40) * DAY);
        const data = { employeeId: id, from: status, to, reason: null, changedAt: iso(clock) };
        // Every third change is an event from before effective dates: effective when recorded.
        const event: EmployeeEvent =
          random(3) === 0
            ? { type: 'EmployeeStatusChanged', data }
            : { type: 'EmployeeStatusChanged', data: { ...data, effectiveAt: iso(effective) } };
        events.push({ event, recordedAt: clock });
        since = event.data.effectiveAt === undefined ? clock : effective;
        status = to;
      }
    }
    return { id, events };
  });
  let last: GlobalPosition | undefined;
  for (let round = 0; plans.some((p) => p.events.length > round); round++) {
    for (const plan of plans) {
      const next = plan.events[round];
      if (!next) continue;
      const metadata = { tenantId, actor: 'spec', occurredAt: iso(next.recordedAt) };
      last = (await store.append(employeeStreamId(tenantId, plan.id), [{ id: randomUUID(), ...next.event, metadata }])).position;
    }
  }
  if (!last) throw new Error('no events');
  return last;
}

const anyRows = z.object({}).passthrough();
/** The whole model, in key order. */
const model = async (pool: DatabasePool) => ({
  versions: await pool.any(sql.type(anyRows)`select * from employee_versions order by tenant_id, employee_id, valid_from`),
  days: await pool.any(
    sql.type(anyRows)`select * from workforce_day_counts where (in_force, hires, exits) <> (0, 0, 0) order by 1, 2, 3, 4`,
  ),
  months: await pool.any(
    sql.type(anyRows)`select * from workforce_month_counts where (in_force, hires, exits) <> (0, 0, 0) order by 1, 2, 3, 4`,
  ),
  dayTotals: await pool.any(
    sql.type(anyRows)`select * from workforce_day_totals where (in_force, hires, exits) <> (0, 0, 0) order by 1, 2, 3`,
  ),
  monthTotals: await pool.any(
    sql.type(anyRows)`select * from workforce_month_totals where (in_force, hires, exits) <> (0, 0, 0) order by 1, 2, 3`,
  ),
});

/** What the department counters add up to per (tenant, day or month, status): what the totals must hold. */
const sumOfDepartments = (pool: DatabasePool, bucket: 'day' | 'month') => {
  const [column, table] = [sql.identifier([bucket]), sql.identifier([`workforce_${bucket}_counts`])];
  return pool.any(sql.type(anyRows)`
    select tenant_id, ${column}, status, sum(in_force)::int8 as in_force, sum(hires)::int8 as hires, sum(exits)::int8 as exits
    from ${table} group by 1, 2, 3 having (sum(in_force), sum(hires), sum(exits)) <> (0, 0, 0) order by 1, 2, 3
  `);
};

/** The counters the versions imply, computed independently in SQL. */
const derivedCounters = (pool: DatabasePool) =>
  pool.any(sql.type(anyRows)`
    select tenant_id, day, department, status, sum(in_force)::int8 as in_force, sum(hires)::int8 as hires, sum(exits)::int8 as exits
    from (
      select tenant_id, (valid_from at time zone 'UTC')::date as day, coalesce(department, '') as department, status, 1 as in_force,
             (valid_from = hired_at)::int as hires,
             -- A version that starts with another change has no previous_status: not an exit (not null).
             coalesce(status = 'inactive' and (valid_from = hired_at or previous_status in ('active', 'on_leave')), false)::int as exits
      from employee_versions
      union all
      select tenant_id, (valid_to at time zone 'UTC')::date, coalesce(department, ''), status, -1, 0, 0 from employee_versions where valid_to is not null
    ) x group by 1, 2, 3, 4 having (sum(in_force), sum(hires), sum(exits)) <> (0, 0, 0) order by 1, 2, 3, 4
  `);

/** The tenant with the largest generated history (the reads below are checked against it). */
const busy = randomUUID();

describe('the workforce projection', () => {
  beforeAll(async () => {
    await givenAHistory(busy, 30, 7);
    await givenAHistory(randomUUID(), 10, 11);
    const end = await givenAHistory(randomUUID(), 10, 13);
    expect(await waitForCheckpoint(db.pool, workforceProjection.name, end, 30_000)).toBe(true);
  }, 60_000);

  it('keeps counters (and their totals over departments) that match its versions, and a rebuild (page by page or bulk) builds the same model as the live projector', async () => {
    const live = await model(db.pool);
    expect(live.versions.length).toBeGreaterThan(50);
    expect(live.days).toEqual(await derivedCounters(db.pool));
    const monthsOfDays = await db.pool.any(sql.type(anyRows)`
      select tenant_id, date_trunc('month', day)::date as month, department, status,
             sum(in_force)::int8 as in_force, sum(hires)::int8 as hires, sum(exits)::int8 as exits
      from workforce_day_counts group by 1, 2, 3, 4 having (sum(in_force), sum(hires), sum(exits)) <> (0, 0, 0) order by 1, 2, 3, 4
    `);
    expect(live.months).toEqual(monthsOfDays);
    expect(live.dayTotals.length).toBeGreaterThan(20);
    expect(live.dayTotals).toEqual(await sumOfDepartments(db.pool, 'day'));
    expect(live.monthTotals).toEqual(await sumOfDepartments(db.pool, 'month'));

    // Page by page (the handler, in small pages), then the bulk fold, then the bulk fold again.
    const { bulk: _, ...pageByPage } = workforceProjection;
    await replayProjection(db.pool, store, pageByPage, { batchSize: 7 });
    expect(await model(db.pool)).toEqual(live);
    await replayProjection(db.pool, store, workforceProjection);
    expect(await model(db.pool)).toEqual(live);
    await replayProjection(db.pool, store, workforceProjection);
    expect(await model(db.pool)).toEqual(live);
  }, 120_000);

  it('answers totals, headcounts and series from its counters exactly as counting its versions would', async () => {
    const employed = sql.fragment`status in ('active', 'on_leave')`;
    const validAt = (t: number) =>
      sql.fragment`valid_from <= ${iso(t)}::timestamptz and (valid_to is null or valid_to > ${iso(t)}::timestamptz)`;
    const count = (where: ReturnType<typeof sql.fragment>) =>
      db.pool.oneFirst(
        sql.type(z.object({ n: z.number() }))`select count(*)::int8 as n from employee_versions where tenant_id = ${busy} and ${where}`,
      );
    const random = lcg(3);
    // Instants all over the history, many of them inside the day of a change.
    const instants = Array.from({ length: 25 }, () => T0 + random(420) * DAY + random(DAY));
    const someone = T0 + 200 * DAY;
    expect(await count(validAt(someone))).toBeGreaterThan(10);
    for (const t of [someone, ...instants]) {
      const { total } = await listEmployeesAsOf(db.pool, busy, { page: 1, limit: 1, asOf: t });
      expect(total, iso(t)).toBe(await count(validAt(t)));
      const filtered = await listEmployeesAsOf(db.pool, busy, { page: 1, limit: 1, asOf: t, department: 'd1', status: 'active' });
      expect(filtered.total, iso(t)).toBe(await count(sql.fragment`${validAt(t)} and department = 'd1' and status = 'active'`));
      const summary = await readWorkforceAt(db.pool, busy, t);
      expect(summary.headcount, iso(t)).toBe(await count(sql.fragment`${validAt(t)} and ${employed}`));
    }
    // A weekly series whose last bucket is open; its headcounts are the counts just before each end.
    const now = T0 + 200 * DAY + 12 * 3_600_000;
    const buckets = workforceBuckets(T0, T0 + 300 * DAY, 'week', now) ?? [];
    const series = await readWorkforceSeries(db.pool, busy, { metric: 'headcount', monthly: false, buckets });
    expect(buckets.at(-1)?.partial).toBe(true);
    for (const [i, bucket] of buckets.entries())
      expect(series[i], iso(bucket.start)).toBe(await count(sql.fragment`${validAt(bucket.end - 1)} and ${employed}`));
  }, 60_000);

  it("reads a tenant-wide series from the totals as the departments' series add up, through the tenant reader too", async () => {
    const reader = await createTenantReader(db.url, { maximumPoolSize: 1 });
    try {
      const now = T0 + 250 * DAY + 7 * 3_600_000;
      const today = floorTo('day', now);
      // Each interval over a range up to the open bucket; and today's open bucket alone (no counter rows, the versions only).
      const ranges = [
        ...(['day', 'week', 'month'] as const).map((interval) => ({ interval, from: T0 - 20 * DAY })),
        { interval: 'day' as const, from: today },
      ];
      for (const { interval, from } of ranges) {
        const buckets = workforceBuckets(from, T0 + 400 * DAY, interval, now) ?? [];
        expect(buckets.at(-1)?.partial).toBe(true);
        for (const metric of ['headcount', 'hires', 'exits'] as const) {
          const query = { metric, monthly: interval === 'month', buckets };
          const total = await readWorkforceSeries(db.pool, busy, query);
          if (from !== today || metric === 'headcount')
            expect(
              total.some((v) => v > 0),
              `${metric} by ${interval}`,
            ).toBe(true);
          const departments = await Promise.all(
            ['d0', 'd1', 'd2'].map((department) => readWorkforceSeries(db.pool, busy, { ...query, department })),
          );
          expect(total, `${metric} by ${interval}`).toEqual(buckets.map((_, i) => departments.reduce((n, d) => n + d[i]!, 0)));
          expect(await readWorkforceSeries(reader, busy, query)).toEqual(total);
          expect(await readWorkforceSeries(reader, busy, { ...query, department: 'd1' })).toEqual(departments[1]);
        }
      }
    } finally {
      await reader.end();
    }
  }, 60_000);

  it('reads a tenant-wide series from the totals themselves, not from the departments', async () => {
    const now = T0 + 250 * DAY + 7 * 3_600_000;
    const buckets = workforceBuckets(T0 - 20 * DAY, T0 + 400 * DAY, 'day', now) ?? [];
    const query = { metric: 'hires' as const, monthly: false, buckets };
    const before = await readWorkforceSeries(db.pool, busy, query);
    const day = await db.pool.oneFirst(sql.type(z.object({ day: z.string() }))`
      select min(day)::text as day from workforce_day_totals where tenant_id = ${busy} and hires > 0
    `);
    const bump = (n: number) =>
      db.pool.query(sql.type(z.object({}))`
        update workforce_day_totals set hires = hires + ${n} where tenant_id = ${busy} and day = ${day}::date and status = (
          select min(status) from workforce_day_totals where tenant_id = ${busy} and day = ${day}::date and hires > 0)
      `);
    await bump(1_000);
    try {
      const after = await readWorkforceSeries(db.pool, busy, query);
      const at = buckets.findIndex((b) => b.start === Date.parse(`${day}T00:00:00Z`));
      expect(at).toBeGreaterThanOrEqual(0);
      expect(after[at]).toBe((before[at] ?? 0) + 1_000);
      expect(after.filter((_, i) => i !== at)).toEqual(before.filter((_, i) => i !== at));
    } finally {
      await bump(-1_000);
    }
  });

  it('reads a tenant-wide series from every department while a model without the totals is live (a rolling deploy)', async () => {
    const reader = await createTenantReader(db.url, { maximumPoolSize: 1 });
    const now = T0 + 250 * DAY + 7 * 3_600_000;
    const queries = (['day', 'week', 'month'] as const).flatMap((interval) =>
      WORKFORCE_METRICS.map((metric) => ({
        metric,
        monthly: interval === 'month',
        buckets: workforceBuckets(T0 - 20 * DAY, T0 + 400 * DAY, interval, now) ?? [],
      })),
    );
    const fromTotals: number[][] = [];
    for (const query of queries) fromTotals.push(await readWorkforceSeries(reader, busy, query));
    const rename = async (from: string, to: string) => {
      for (const bucket of ['day', 'month'])
        await db.pool.query(sql.type(z.object({}))`
          alter table ${sql.identifier([`workforce_${bucket}_totals${from}`])} rename to ${sql.identifier([`workforce_${bucket}_totals${to}`])}
        `);
    };
    // No event arrives meanwhile: the projector, which writes the totals, stays idle.
    await rename('', '_hidden');
    try {
      for (const [i, query] of queries.entries()) {
        expect(await readWorkforceSeries(reader, busy, query), `${query.metric}`).toEqual(fromTotals[i]);
        expect(await readWorkforceSeries(db.pool, busy, query), `${query.metric}`).toEqual(fromTotals[i]);
      }
    } finally {
      await rename('_hidden', '');
      await reader.end();
    }
    // The pool remembers the totals were missing; told they are back, it reads them again.
    lookForTotalsAgain(db.pool);
    const at = queries.findIndex((q) => q.metric === 'hires');
    const query = queries[at]!;
    await db.pool.query(sql.type(z.object({}))`update workforce_day_totals set hires = hires + 1 where tenant_id = ${busy}`);
    try {
      expect(await readWorkforceSeries(db.pool, busy, query)).not.toEqual(fromTotals[at]);
    } finally {
      await db.pool.query(sql.type(z.object({}))`update workforce_day_totals set hires = hires - 1 where tenant_id = ${busy}`);
    }
    expect(await readWorkforceSeries(db.pool, busy, query)).toEqual(fromTotals[at]);
  }, 60_000);

  it("parks an event it cannot apply and goes on with the others' events", async () => {
    const tenantId = randomUUID();
    const bad = nextId();
    const good = nextId();
    const hired = (id: string, hiredAt: string): EmployeeEvent => ({
      type: 'EmployeeHired',
      data: { employeeId: id, email: `${id}@x.test`, firstName: 'F', lastName: 'L', department: 'd', status: 'active', hiredAt },
    });
    const metadata = { tenantId, actor: 'spec', occurredAt: iso(T0) };
    await store.append(employeeStreamId(tenantId, bad), [{ id: randomUUID(), ...hired(bad, 'not an instant'), metadata }]);
    const { position } = await store.append(employeeStreamId(tenantId, good), [
      { id: randomUUID(), ...hired(good, '2024-02-01T00:00:00.000Z'), metadata },
    ]);
    expect(await waitForCheckpoint(db.pool, workforceProjection.name, position, 30_000)).toBe(true);
    const ids = await db.pool.anyFirst(
      sql.type(z.object({ employee_id: z.string() }))`select employee_id from employee_versions where tenant_id = ${tenantId}`,
    );
    expect(ids).toEqual([good]);
    const parked = await listParkedEvents(db.pool, workforceProjection.name);
    expect(parked.map((p) => p.event.streamId)).toEqual([employeeStreamId(tenantId, bad)]);
  }, 60_000);
});
