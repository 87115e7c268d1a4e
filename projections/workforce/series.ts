import { z } from 'zod';
import type { FragmentSqlToken, IdentifierSqlToken } from 'slonik';
import { sql, withTenant, type DatabasePool, type DatabaseTransactionConnection } from '../../shared/db/pool.ts';
import { sqlStateOf } from '../../shared/db/sqlState.ts';
import type { TenantReader } from '../../shared/db/tenantReader.ts';
import { DAY, floorTo, inclusiveEnd } from '../../shared/series/intervals.ts';
import { inTenant } from '../employees/queries.ts';
import { pgDate, pgIso } from '../../shared/db/timestamps.ts';

/**
 * Workforce figures over time, from the workforce read model's counters (workforceProjection.ts):
 * never by folding streams, and never by counting a tenant's employees.
 *
 * A bucket is [start, end): headcount is the number of employees `active` or `on_leave` just before
 * its end (so the end of one bucket is the start of the next), hires are hire dates in it, exits
 * changes to `inactive` effective in it, and turnoverRate = exits ÷ the average of the headcount at
 * its start and at its end (0 when both are 0). The bucket still open ends at now, inclusive.
 *
 * Whole days come from the day counters (whole months from the month counters when the buckets
 * are months); only the open bucket's last, unfinished day is read from the versions themselves.
 * So a series costs O(days in its range) counter rows plus one day of versions, whatever the
 * number of employees, and the headcount before the range is O(months before it) rows. A series
 * of one department reads that department's counters; one of the whole tenant reads the totals
 * over every department, so neither grows with the number of departments.
 */
export const WORKFORCE_METRICS = ['headcount', 'hires', 'exits', 'turnoverRate'] as const;
export type WorkforceMetric = (typeof WORKFORCE_METRICS)[number];

export type Bucket = { readonly start: number; readonly end: number; readonly partial: boolean };
type Flow = { inForce: number; hires: number; exits: number };
type Atom = Flow & { t: number };

const EMPLOYED = sql.fragment`status in ('active', 'on_leave')`;

const keys = (tenantId: string, department: string | undefined) =>
  department === undefined
    ? sql.fragment`tenant_id = ${tenantId}::uuid`
    : sql.fragment`tenant_id = ${tenantId}::uuid and department = ${department}`;

/** The counter tables a series adds up, and the condition that picks its rows there. */
type Counters = { readonly day: IdentifierSqlToken; readonly month: IdentifierSqlToken; readonly key: FragmentSqlToken };

const departmentCounters = (tenantId: string, department: string | undefined): Counters => ({
  day: sql.identifier(['workforce_day_counts']),
  month: sql.identifier(['workforce_month_counts']),
  key: keys(tenantId, department),
});

const tenantTotals = (tenantId: string): Counters => ({
  day: sql.identifier(['workforce_day_totals']),
  month: sql.identifier(['workforce_month_totals']),
  key: keys(tenantId, undefined),
});

/**
 * A series statement's one row: the headcount before the range, the counter rows in it (by day
 * number since 1970-01-01, in no order, several per day), and the open day's flows (in force,
 * hires, exits). One row of arrays rather than a row per day: the gateway parses and checks one
 * row instead of hundreds, which was most of its work per series.
 */
const seriesRow = z.object({
  before: z.number(),
  days: z.array(z.number()),
  in_force: z.array(z.number()),
  hires: z.array(z.number()),
  exits: z.array(z.number()),
  rest: z.array(z.number()),
});

/**
 * The counter rows of those employed just before `day` (day-aligned): whole months, then the days
 * of its month; each row's `n`, after the `leading` columns (`department, ` or none).
 */
function employedBefore(c: Counters, day: number, leading: FragmentSqlToken = sql.fragment``): FragmentSqlToken {
  const month = floorTo('month', day);
  return sql.fragment`
      select ${leading} in_force as n from ${c.month} where ${c.key} and ${EMPLOYED} and month < ${pgDate(month)}::date
      union all
      select ${leading} in_force from ${c.day} where ${c.key} and ${EMPLOYED} and day >= ${pgDate(month)}::date and day < ${pgDate(day)}::date`;
}

/** Employed just before `day` (day-aligned). */
function beforePart(c: Counters, day: number): FragmentSqlToken {
  return sql.fragment`(select coalesce(sum(n), 0)::int4 from (${employedBefore(c, day)}) b)`;
}

/**
 * A column's values as a JSON array of integers: pg's client parses JSON natively, where an int4[]
 * goes through a character-by-character parser written in JavaScript, the most of a series'
 * parsing for the thousand-odd values of a year of days.
 */
const jsonArray = (column: FragmentSqlToken): FragmentSqlToken => sql.fragment`coalesce(array_to_json(array_agg(${column}::int4)), '[]')`;

/**
 * Counter rows in [from, to) (day-aligned, or month-aligned for `month`): each row's day or month,
 * its headcount change if its status counts as employed, its hires and exits. Not summed per day
 * here: a day has a row per status, and PostgreSQL's grouping cost twice the scan, where the
 * caller adds them up for nothing.
 */
function atomsPart(c: Counters, level: 'day' | 'month', from: number, to: number): FragmentSqlToken {
  const column = sql.identifier([level]);
  return sql.fragment`
    select ${column} - date '1970-01-01' as t, case when ${EMPLOYED} then in_force else 0 end as in_force, hires, exits
    from ${level === 'day' ? c.day : c.month}
    where ${c.key} and ${column} >= ${pgDate(from)}::date and ${column} < ${pgDate(to)}::date`;
}

/** Within [from, to) (less than a day), from the versions: the change in headcount, hires and exits. */
function restPart(key: FragmentSqlToken, from: number, to: number): FragmentSqlToken {
  return sql.fragment`
    (select array[coalesce(sum(in_force), 0), coalesce(sum(hires), 0), coalesce(sum(exits), 0)]::int4[] from (${flowRows(key, from, to)}) r)`;
}

/**
 * The versions that start or end in [from, to), as (department, in_force, hires, exits) each.
 * Only an employee's first version starts at the hire; an exit follows a status that was not
 * inactive, or is that first version itself (inactive from the hire: versions.ts).
 */
function flowRows(key: FragmentSqlToken, from: number, to: number): FragmentSqlToken {
  const [a, b] = [pgIso(from), pgIso(to)];
  return sql.fragment`
    select coalesce(department, '') as department,
           case when ${EMPLOYED} then 1 else 0 end as in_force,
           case when valid_from = hired_at then 1 else 0 end as hires,
           case when status = 'inactive' and (valid_from = hired_at or previous_status in ('active', 'on_leave')) then 1 else 0 end as exits
    from employee_versions where ${key} and valid_from >= ${a}::timestamptz and valid_from < ${b}::timestamptz
    union all
    select coalesce(department, ''), -1, 0, 0
    from employee_versions where ${key} and ${EMPLOYED} and valid_to >= ${a}::timestamptz and valid_to < ${b}::timestamptz`;
}

const departmentCountRow = z.object({ department: z.string(), n: z.number() });

/** Employed just before `day` (day-aligned), per department ('' for none). */
async function inForceBefore(tx: DatabaseTransactionConnection, tenantId: string, day: number) {
  return tx.any(sql.type(departmentCountRow)`
    select department, sum(n)::int8 as n
    from (${employedBefore(departmentCounters(tenantId, undefined), day, sql.fragment`department,`)}) x group by department
  `);
}

const departmentFlowRow = z.object({ department: z.string(), in_force: z.number(), hires: z.number(), exits: z.number() });

/** Within [from, to) (less than a day), from the versions: per department, the change in headcount, hires and exits. */
async function flowsWithin(tx: DatabaseTransactionConnection, key: ReturnType<typeof keys>, from: number, to: number) {
  return tx.any(sql.type(departmentFlowRow)`
    select department, sum(in_force)::int8 as in_force, sum(hires)::int8 as hires, sum(exits)::int8 as exits
    from (${flowRows(key, from, to)}) x group by department
  `);
}

/** A read's statements add up counters and versions: all must see one state of the read model. */
const SNAPSHOT = { snapshot: true } as const;

/** PostgreSQL's `undefined_table`. */
const UNDEFINED_TABLE = '42P01';

/** Per database (pool or reader): until when a series reads the department counters, the totals being absent. */
const totalsMissingUntil = new WeakMap<object, number>();
const TOTALS_LOOKED_UP_AGAIN_MS = 30_000;

/** Makes the next tenant-wide series on `scope` look for the totals at once (they were just created). */
export const lookForTotalsAgain = (scope: DatabasePool | TenantReader): void => void totalsMissingUntil.delete(scope);

/**
 * The value of `metric` in each bucket (consecutive, as `workforceBuckets` makes them). One
 * statement, so one state of the read model without a transaction of its own: through the
 * transaction-free tenant reader when there is one.
 */
export async function readWorkforceSeries(
  scope: DatabasePool | TenantReader,
  tenantId: string,
  query: {
    readonly metric: WorkforceMetric;
    /** Whether the buckets are calendar months (then whole months are read from the month counters). */
    readonly monthly: boolean;
    readonly buckets: readonly Bucket[];
    readonly department?: string | undefined;
  },
): Promise<number[]> {
  const { buckets, metric, department } = query;
  const first = buckets[0];
  const last = buckets.at(-1);
  if (!first || !last) return [];
  // Whole days end at `cut`; an open bucket's unfinished day is read from the versions.
  const cut = last.partial ? floorTo('day', last.end) : last.end;
  const statement = (c: Counters) => {
    // Whole months from the month rows, the days after them from the day rows (an empty range
    // reads none: the open bucket alone). Their order does not matter: the rows are sorted below.
    const days = query.monthly ? Math.max(first.start, floorTo('month', cut)) : first.start;
    const atoms = [atomsPart(c, 'day', days, cut)];
    if (query.monthly && first.start < floorTo('month', cut)) atoms.push(atomsPart(c, 'month', first.start, floorTo('month', cut)));
    const rest =
      last.partial && cut < last.end ? restPart(keys(tenantId, department), cut, last.end) : sql.fragment`array[0, 0, 0]::int4[]`;
    return sql.type(seriesRow)`
      select ${beforePart(c, first.start)} as before,
             ${jsonArray(sql.fragment`a.t`)} as days, ${jsonArray(sql.fragment`a.in_force`)} as in_force,
             ${jsonArray(sql.fragment`a.hires`)} as hires, ${jsonArray(sql.fragment`a.exits`)} as exits,
             ${rest} as rest
      from (${sql.join(atoms, sql.fragment` union all `)}) a
    `;
  };
  const read = (c: Counters) => inTenant(scope, tenantId, async (db) => (await db.any(statement(c)))[0]);
  let row: z.infer<typeof seriesRow> | undefined;
  if (department !== undefined || (totalsMissingUntil.get(scope) ?? 0) > Date.now()) {
    row = await read(departmentCounters(tenantId, department));
  } else {
    try {
      row = await read(tenantTotals(tenantId));
    } catch (error) {
      // A model built before the totals existed (a rolling deploy, until the rebuild that adds
      // them swaps in): every department's counters add up to the same figures. Remembered for
      // a while, so that not every read pays a failed statement (and a line in PostgreSQL's log).
      if (sqlStateOf(error) !== UNDEFINED_TABLE) throw error;
      totalsMissingUntil.set(scope, Date.now() + TOTALS_LOOKED_UP_AGAIN_MS);
      row = await read(departmentCounters(tenantId, undefined));
    }
  }
  if (!row) throw new Error('a workforce series statement returned no row');

  let headcount = row.before;
  const [restInForce = 0, restHires = 0, restExits = 0] = row.rest;
  const rest: Flow = { inForce: restInForce, hires: restHires, exits: restExits };
  const byDay = new Map<number, Atom>();
  row.days.forEach((day, i) => {
    let atom = byDay.get(day);
    if (!atom) byDay.set(day, (atom = { t: day * DAY, inForce: 0, hires: 0, exits: 0 }));
    atom.inForce += row.in_force[i] ?? 0;
    atom.hires += row.hires[i] ?? 0;
    atom.exits += row.exits[i] ?? 0;
  });
  const atoms = [...byDay.values()].sort((a, b) => a.t - b.t);
  let next = 0;
  return buckets.map((bucket) => {
    const flow: Flow = { inForce: 0, hires: 0, exits: 0 };
    for (; next < atoms.length && atoms[next]!.t < Math.min(bucket.end, cut); next++) {
      const atom = atoms[next]!;
      flow.inForce += atom.inForce;
      flow.hires += atom.hires;
      flow.exits += atom.exits;
    }
    if (bucket === last) {
      flow.inForce += rest.inForce;
      flow.hires += rest.hires;
      flow.exits += rest.exits;
    }
    const start = headcount;
    headcount += flow.inForce;
    switch (metric) {
      case 'headcount':
        return headcount;
      case 'hires':
        return flow.hires;
      case 'exits':
        return flow.exits;
      case 'turnoverRate': {
        const average = (start + headcount) / 2;
        return average === 0 ? 0 : Math.round((flow.exits / average) * 1e6) / 1e6;
      }
      default: {
        const never: never = metric;
        throw new Error(`unknown metric ${String(never)}`);
      }
    }
  });
}

/** Headcount at `at` (inclusive), in total and per department ('' for employees without one). */
export async function readWorkforceAt(pool: DatabasePool, tenantId: string, at: number) {
  const key = keys(tenantId, undefined);
  const end = inclusiveEnd(at);
  const day = floorTo('day', end);
  return withTenant(
    pool,
    tenantId,
    async (tx) => {
      const byDepartment = new Map<string, number>();
      for (const r of await inForceBefore(tx, tenantId, day)) byDepartment.set(r.department, (byDepartment.get(r.department) ?? 0) + r.n);
      for (const r of await flowsWithin(tx, key, day, end)) {
        byDepartment.set(r.department, (byDepartment.get(r.department) ?? 0) + r.in_force);
      }
      const counted = [...byDepartment].filter(([, n]) => n !== 0).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      return { headcount: counted.reduce((acc, [, n]) => acc + n, 0), byDepartment: Object.fromEntries(counted) };
    },
    SNAPSHOT,
  );
}
