import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { monotonicFactory } from 'ulid';
import { z } from 'zod';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { sql, withTenant } from '../../../shared/db/pool.ts';
import { createTenantReader, type TenantReader } from '../../../shared/db/tenantReader.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore, GlobalPosition } from '../../../shared/event-store/port.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { employeesProjection } from '../../../projections/employees/employeesProjection.ts';
import { listEmployees, planHireRange, type EmployeeFilter } from '../../../projections/employees/queries.ts';
import type { DateBound } from '../../../shared/validation.ts';
import { employeeStreamId, type EmployeeEvent, type EmployeeStatus } from '../../../services/employees/contract.ts';

/**
 * `meta.total` with a hire-date range is summed from month and day counters plus the rows of
 * at most two partial days: checked against counting the rows themselves, for ranges that
 * start and end inside months and days, after status and department changes.
 */
let db: TestDatabase;
let store: EventStore;
let reader: TenantReader;
let projector: ProjectorHandle;
const nextId = monotonicFactory();

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  reader = await createTenantReader(db.url, { maximumPoolSize: 2 });
  projector = runProjection(db.pool, store, employeesProjection, {
    pollIntervalMs: 50,
    onError: (error) => console.error('projector', error),
  });
});
afterAll(async () => {
  await projector?.stop();
  await reader?.end();
  await store?.close();
  await db?.drop();
});

type Person = { id: string; hiredAt: string; department: string | null; status: EmployeeStatus };

const meta = (tenantId: string) => ({ tenantId, actor: 'spec', occurredAt: '2025-01-01T00:00:00.000Z' });

async function append(tenantId: string, id: string, events: EmployeeEvent[]): Promise<GlobalPosition> {
  const result = await store.append(
    employeeStreamId(tenantId, id),
    events.map((e) => ({ id: randomUUID(), ...e, metadata: meta(tenantId) })),
  );
  return result.position;
}

/** Given a tenant whose staff was hired at these instants, some moved and some changed status afterwards. */
async function givenStaff(hiredAt: readonly string[]): Promise<{ tenantId: string; people: Person[] }> {
  const tenantId = randomUUID();
  const people: Person[] = [];
  let last: GlobalPosition | undefined;
  for (const [i, at] of hiredAt.entries()) {
    const id = nextId();
    const department = i % 3 === 0 ? null : i % 3 === 1 ? 'sales' : 'ops';
    last = await append(tenantId, id, [
      {
        type: 'EmployeeHired',
        data: {
          employeeId: id,
          email: `${id.toLowerCase()}@example.test`,
          firstName: 'F',
          lastName: 'L',
          department,
          status: 'active',
          hiredAt: at,
        },
      },
    ]);
    people.push({ id, hiredAt: at, department, status: 'active' });
  }
  // Changes after the hires: counters must move out of one bucket and into another.
  for (const [i, person] of people.entries()) {
    if (i % 4 === 1) {
      last = await append(tenantId, person.id, [
        {
          type: 'EmployeeStatusChanged',
          data: { employeeId: person.id, from: 'active', to: 'on_leave', reason: null, changedAt: '2025-02-01T00:00:00.000Z' },
        },
      ]);
      person.status = 'on_leave';
    }
    if (i % 5 === 2) {
      last = await append(tenantId, person.id, [
        { type: 'EmployeeDetailsChanged', data: { employeeId: person.id, department: 'research' } },
      ]);
      person.department = 'research';
    }
  }
  if (last) expect(await waitForCheckpoint(db.pool, employeesProjection.name, last, 20_000)).toBe(true);
  return { tenantId, people };
}

const inRange = (p: Person, filter: EmployeeFilter) => {
  const t = Date.parse(p.hiredAt);
  if (filter.hiredFrom && t < Date.parse(filter.hiredFrom.at)) return false;
  if (filter.hiredTo) {
    const to = Date.parse(filter.hiredTo.at);
    if (filter.hiredTo.dateOnly ? t >= to + 86_400_000 : t > to) return false;
  }
  if (filter.status !== undefined && p.status !== filter.status) return false;
  if (filter.department !== undefined && p.department !== filter.department) return false;
  return true;
};

const date = (d: string): DateBound => ({ at: `${d}T00:00:00.000Z`, dateOnly: true });
const instant = (t: string): DateBound => ({ at: new Date(t).toISOString(), dateOnly: false });

// Spread over three years, several per month and per day, some exactly at midnight / month starts.
const HIRES = [
  '2023-01-01T00:00:00.000Z',
  '2023-01-15T10:00:00.000Z',
  '2023-01-31T23:59:59.999Z',
  '2023-02-01T00:00:00.000Z',
  '2023-02-14T08:30:00.000Z',
  '2023-02-14T17:45:00.000Z',
  '2023-03-31T12:00:00.000Z',
  '2023-06-30T23:00:00.000Z',
  '2023-07-01T00:00:00.001Z',
  '2023-12-31T23:59:59.000Z',
  '2024-01-01T00:00:00.000Z',
  '2024-02-29T12:00:00.000Z',
  '2024-03-01T09:00:00.000Z',
  '2024-05-15T00:00:00.000Z',
  '2024-05-15T13:13:13.000Z',
  '2024-05-16T00:00:00.000Z',
  '2024-08-08T08:08:08.000Z',
  '2024-11-30T22:00:00.000Z',
  '2024-12-01T01:00:00.000Z',
  '2025-01-10T10:10:10.000Z',
  '2025-03-03T03:03:03.000Z',
  '2025-03-31T23:59:59.999Z',
  '2025-04-01T00:00:00.000Z',
  '1999-12-31T23:59:59.999Z',
];

describe('when totals are asked for a hire-date range', () => {
  let staff: { tenantId: string; people: Person[] };
  beforeAll(async () => {
    staff = await givenStaff(HIRES);
  });

  const cases: [string, EmployeeFilter][] = [
    ['dates inside months (partial edge months)', { hiredFrom: date('2023-01-15'), hiredTo: date('2024-05-15') }],
    ['whole months exactly', { hiredFrom: date('2023-02-01'), hiredTo: date('2024-02-29') }],
    ['one day', { hiredFrom: date('2024-05-15'), hiredTo: date('2024-05-15') }],
    ['inside one month', { hiredFrom: date('2023-02-02'), hiredTo: date('2023-02-20') }],
    ['instants inside days (partial edge days)', { hiredFrom: instant('2023-01-15T09:00:00Z'), hiredTo: instant('2024-05-15T13:13:13Z') }],
    ['an instant range within one day', { hiredFrom: instant('2024-05-15T00:00:00Z'), hiredTo: instant('2024-05-15T12:00:00Z') }],
    ['an inclusive end at midnight', { hiredFrom: date('2023-01-01'), hiredTo: instant('2024-05-16T00:00:00Z') }],
    ['an end one millisecond before a month', { hiredTo: instant('2023-01-31T23:59:59.999Z') }],
    ['from only', { hiredFrom: date('2024-03-01') }],
    ['to only, mid-month', { hiredTo: date('2024-05-14') }],
    [
      'with an offset (normalised to UTC)',
      { hiredFrom: instant('2023-07-01T01:00:00+01:00'), hiredTo: instant('2025-03-31T20:00:00-04:00') },
    ],
    ['status filter after status changes', { status: 'on_leave', hiredFrom: date('2023-01-20'), hiredTo: date('2025-03-31') }],
    [
      'department filter after moves',
      { department: 'research', hiredFrom: date('2023-01-20'), hiredTo: instant('2025-03-31T23:59:59.998Z') },
    ],
    ['department and status', { department: 'sales', status: 'active', hiredFrom: date('2023-02-14'), hiredTo: date('2024-12-01') }],
  ];

  it.each(cases)('%s: counts exactly the matching employees', async (_label, filter) => {
    const expected = staff.people.filter((p) => inRange(p, filter)).length;
    const page = await listEmployees(db.pool, staff.tenantId, { page: 1, limit: 100, ...filter });
    expect(page.total).toBe(expected);
    expect(page.data.map((e) => e.id).sort()).toEqual(
      staff.people
        .filter((p) => inRange(p, filter))
        .map((p) => p.id)
        .sort(),
    );
    // The transaction-free reader answers the same.
    expect(await listEmployees(reader, staff.tenantId, { page: 1, limit: 100, ...filter })).toEqual(page);
  });

  it('counts exactly for arbitrary ranges (property)', async () => {
    const day = 86_400_000;
    const start = Date.parse('2022-12-01T00:00:00Z');
    const span = 900 * day;
    const bound = fc.tuple(fc.integer({ min: 0, max: span }), fc.boolean()).map(([offset, dateOnly]): DateBound => {
      const t = start + offset;
      // Date bounds land on midnight; instants anywhere (often near day and month edges).
      return dateOnly ? date(new Date(t).toISOString().slice(0, 10)) : { at: new Date(t).toISOString(), dateOnly: false };
    });
    await fc.assert(
      fc.asyncProperty(fc.option(bound, { nil: undefined }), fc.option(bound, { nil: undefined }), async (from, to) => {
        const filter: EmployeeFilter = { ...(from && { hiredFrom: from }), ...(to && { hiredTo: to }) };
        const page = await listEmployees(reader, staff.tenantId, { page: 1, limit: 1, ...filter });
        expect(page.total).toBe(staff.people.filter((p) => inRange(p, filter)).length);
      }),
      { numRuns: 60 },
    );
  });
});

describe('when a range is planned', () => {
  it('counts rows only inside the partial edge days, and whole months from the month counters', () => {
    const plan = planHireRange(Date.parse('2023-01-15T09:00:00Z'), Date.parse('2024-05-15T13:00:00Z'), true);
    expect(plan.rows).toEqual([
      { from: Date.parse('2023-01-15T09:00:00Z'), to: Date.parse('2023-01-16T00:00:00Z') },
      { from: Date.parse('2024-05-15T00:00:00Z'), to: Date.parse('2024-05-15T13:00:00Z') },
    ]);
    expect(plan.days).toEqual([
      { from: '2023-01-16', to: '2023-02-01' },
      { from: '2024-05-01', to: '2024-05-15' },
    ]);
    expect(plan.months).toEqual({ from: '2023-02-01', to: '2024-05-01' });
  });

  it('needs no rows at all for date-only bounds', () => {
    const plan = planHireRange(Date.parse('2023-01-15T00:00:00Z'), Date.parse('2024-05-16T00:00:00Z'), false);
    expect(plan.rows).toEqual([]);
  });
});

describe('when the transaction-free reader is used', () => {
  it('is the tenant role, read-only, and sees only the tenant it was given, even without a tenant filter', async () => {
    const a = await givenStaff(['2024-01-01T00:00:00.000Z', '2024-01-02T00:00:00.000Z']);
    const b = await givenStaff(['2024-01-03T00:00:00.000Z']);
    const whoAndHowMany = z.object({ who: z.string(), n: z.number() });
    const seenByA = (
      await reader.read(a.tenantId, (q) => q.any(sql.type(whoAndHowMany)`select current_user as who, count(*)::int as n from employees`))
    )[0];
    const seenByB = (
      await reader.read(b.tenantId, (q) => q.any(sql.type(whoAndHowMany)`select current_user as who, count(*)::int as n from employees`))
    )[0];
    expect(seenByA).toEqual({ who: 'eas_tenant', n: 2 });
    expect(seenByB).toEqual({ who: 'eas_tenant', n: 1 });
    // Same counts as the transaction path, which is what the RLS suite checks.
    expect(
      await withTenant(db.pool, a.tenantId, (tx) =>
        tx.oneFirst(sql.type(z.object({ n: z.number() }))`select count(*)::int as n from employees`),
      ),
    ).toBe(2);
    await expect(
      reader.read(a.tenantId, (q) => q.any(sql.type(z.object({}))`delete from employees where tenant_id = ${b.tenantId}::uuid`)),
    ).rejects.toThrow(/read-only/);
  });
});
