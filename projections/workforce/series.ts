import { z } from 'zod';
import { sql, withTenant, type DatabasePool, type DatabaseTransactionConnection } from '../../shared/db/pool.ts';
import { floorTo, inclusiveEnd } from '../../shared/series/intervals.ts';
import { pgDate, pgIso } from './instants.ts';

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
 * number of employees, and the headcount before the range is O(months before it) rows.
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

const atomRow = z.object({ t: z.string(), in_force: z.number(), hires: z.number(), exits: z.number() });

/** Counter rows in [from, to) (day-aligned, or month-aligned for `month`), summed per day or month. */
async function loadAtoms(
  tx: DatabaseTransactionConnection,
  key: ReturnType<typeof keys>,
  level: 'day' | 'month',
  from: number,
  to: number,
): Promise<Atom[]> {
  if (from >= to) return [];
  const table = sql.identifier([level === 'day' ? 'workforce_day_counts' : 'workforce_month_counts']);
  const column = sql.identifier([level]);
  const rows = await tx.any(sql.type(atomRow)`
    select ${column}::text as t, coalesce(sum(in_force) filter (where ${EMPLOYED}), 0)::int8 as in_force,
           sum(hires)::int8 as hires, sum(exits)::int8 as exits
    from ${table} where ${key} and ${column} >= ${pgDate(from)}::date and ${column} < ${pgDate(to)}::date
    group by ${column} order by ${column}
  `);
  return rows.map((r) => ({ t: Date.parse(`${r.t}T00:00:00Z`), inForce: r.in_force, hires: r.hires, exits: r.exits }));
}

/** Employed just before `day` (day-aligned), per department ('' for none): whole months, then days. */
async function inForceBefore(tx: DatabaseTransactionConnection, key: ReturnType<typeof keys>, day: number) {
  const month = floorTo('month', day);
  return tx.any(sql.type(z.object({ department: z.string(), n: z.number() }))`
    select department, sum(n)::int8 as n from (
      select department, in_force as n from workforce_month_counts where ${key} and ${EMPLOYED} and month < ${pgDate(month)}::date
      union all
      select department, in_force from workforce_day_counts
      where ${key} and ${EMPLOYED} and day >= ${pgDate(month)}::date and day < ${pgDate(day)}::date
    ) x group by department
  `);
}

/** Within [from, to) (less than a day), from the versions: per department, the change in headcount, hires and exits. */
async function flowsWithin(tx: DatabaseTransactionConnection, key: ReturnType<typeof keys>, from: number, to: number) {
  const [a, b] = [pgIso(from), pgIso(to)];
  return tx.any(sql.type(z.object({ department: z.string(), in_force: z.number(), hires: z.number(), exits: z.number() }))`
    select department, sum(in_force)::int8 as in_force, sum(hires)::int8 as hires, sum(exits)::int8 as exits from (
      select coalesce(department, '') as department,
             case when ${EMPLOYED} then 1 else 0 end as in_force,
             -- Only an employee's first version starts at the hire; an exit follows a status that was
             -- not inactive, or is that first version itself (inactive from the hire: versions.ts).
             case when valid_from = hired_at then 1 else 0 end as hires,
             case when status = 'inactive' and (valid_from = hired_at or previous_status in ('active', 'on_leave')) then 1 else 0 end as exits
      from employee_versions where ${key} and valid_from >= ${a}::timestamptz and valid_from < ${b}::timestamptz
      union all
      select coalesce(department, ''), -1, 0, 0
      from employee_versions where ${key} and ${EMPLOYED} and valid_to >= ${a}::timestamptz and valid_to < ${b}::timestamptz
    ) x group by department
  `);
}

/** A read's statements add up counters and versions: all must see one state of the read model. */
const SNAPSHOT = { snapshot: true } as const;

const sum = (rows: readonly { n: number }[]) => rows.reduce((acc, r) => acc + r.n, 0);

/** The value of `metric` in each bucket (consecutive, as `workforceBuckets` makes them). */
export async function readWorkforceSeries(
  pool: DatabasePool,
  tenantId: string,
  query: {
    readonly metric: WorkforceMetric;
    /** Whether the buckets are calendar months (then whole months are read from the month counters). */
    readonly monthly: boolean;
    readonly buckets: readonly Bucket[];
    readonly department?: string | undefined;
  },
): Promise<number[]> {
  const { buckets, metric } = query;
  const first = buckets[0];
  const last = buckets.at(-1);
  if (!first || !last) return [];
  const key = keys(tenantId, query.department);
  return withTenant(
    pool,
    tenantId,
    async (tx) => {
      // Whole days end at `cut`; an open bucket's unfinished day is read from the versions.
      const cut = last.partial ? floorTo('day', last.end) : last.end;
      const atoms = query.monthly
        ? [
            ...(await loadAtoms(tx, key, 'month', first.start, floorTo('month', cut))),
            ...(await loadAtoms(tx, key, 'day', Math.max(first.start, floorTo('month', cut)), cut)),
          ]
        : await loadAtoms(tx, key, 'day', first.start, cut);
      const rest = last.partial && cut < last.end ? await flowsWithin(tx, key, cut, last.end) : [];
      let headcount = sum(await inForceBefore(tx, key, first.start));
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
          for (const r of rest) {
            flow.inForce += r.in_force;
            flow.hires += r.hires;
            flow.exits += r.exits;
          }
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
    },
    SNAPSHOT,
  );
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
      for (const r of await inForceBefore(tx, key, day)) byDepartment.set(r.department, (byDepartment.get(r.department) ?? 0) + r.n);
      for (const r of await flowsWithin(tx, key, day, end)) {
        byDepartment.set(r.department, (byDepartment.get(r.department) ?? 0) + r.in_force);
      }
      const counted = [...byDepartment].filter(([, n]) => n !== 0).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      return { headcount: counted.reduce((acc, [, n]) => acc + n, 0), byDepartment: Object.fromEntries(counted) };
    },
    SNAPSHOT,
  );
}
