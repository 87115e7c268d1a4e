import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DatabasePool, type DatabaseTransactionConnection } from '../../../shared/db/pool.ts';
import { readWorkforceAt, readWorkforceSeries } from '../../../projections/workforce/series.ts';
import { sqlAt } from '../../support/database.ts';
import { createWorkforceHarness, type WorkforceHarness } from '../../support/harness/workforce.ts';

/**
 * A workforce read adds up counters and versions (a summary in several statements, a series in
 * one); a projector batch that commits while it runs must not show up in some parts and not in
 * others.
 */
let h: WorkforceHarness;
beforeAll(async () => {
  h = await createWorkforceHarness();
}, 60_000);
afterAll(async () => {
  await h?.close();
});

const DAY = 86_400_000;
const at = (iso: string) => Date.parse(iso);

/** `pool`, whose transactions run `between` (on another connection, committed) after their first `any`. */
function interleaved(pool: DatabasePool, between: () => Promise<void>): DatabasePool {
  const wrap = (tx: DatabaseTransactionConnection): DatabaseTransactionConnection => {
    let done = false;
    return new Proxy(tx, {
      get(target, key) {
        const value: unknown = Reflect.get(target, key);
        if (key !== 'any') return typeof value === 'function' ? value.bind(target) : value;
        return async (...args: Parameters<DatabaseTransactionConnection['any']>) => {
          const rows = await target.any(...args);
          if (!done) {
            done = true;
            await between();
          }
          return rows;
        };
      },
    });
  };
  return new Proxy(pool, {
    get(target, key) {
      if (key !== 'transaction') return Reflect.get(target, key);
      return <T>(handler: (tx: DatabaseTransactionConnection) => Promise<T>) => target.transaction((tx) => handler(wrap(tx)));
    },
  });
}

/**
 * What a projector batch adds for one employee in `department`, active from 5 January until
 * 20 January 2026 (+1 and −1 on those days, and their month), and one version row for that span.
 */
const oneEmployee = (tenantId: string, department: string) => () =>
  sqlAt(
    h.db.url,
    `with days as (
       insert into workforce_day_counts (tenant_id, day, department, status, in_force, hires, exits)
       values ($1, '2026-01-05', $2, 'active', 1, 1, 0), ($1, '2026-01-20', $2, 'active', -1, 0, 0)
     ), versions as (
       insert into employee_versions
         (tenant_id, employee_id, valid_from, valid_to, department, first_name, last_name, email, status, hired_at, previous_status, revision)
       values ($1, 'E1', '2026-01-05T00:00:00Z', '2026-01-20T00:00:00Z', $2, 'F', 'L', 'e@x.test', 'active', '2026-01-05T00:00:00Z', null, 0)
     )
     insert into workforce_month_counts (tenant_id, month, department, status, in_force, hires, exits)
     values ($1, '2026-01-01', $2, 'active', 0, 1, 0)`,
    [tenantId, department],
  ).then(() => undefined);

describe('a workforce read while the projector commits', () => {
  it('the series sees the read model as it was when the read began, in every statement', async () => {
    const { tenant } = await h.tenant();
    // Days 10 … 24 January, in one statement: the projector's batch commits right after it starts
    // (`interleaved`), and the counters of the range and the headcount before it must not mix.
    const buckets = Array.from({ length: 15 }, (_, i) => {
      const start = at('2026-01-10T00:00:00Z') + i * DAY;
      return { start, end: start + DAY, partial: false };
    });
    const pool = interleaved(h.db.pool, oneEmployee(tenant.tenantId, 'snap'));
    const values = await readWorkforceSeries(pool, tenant.tenantId, { metric: 'headcount', monthly: false, buckets, department: 'snap' });
    // Before the batch: nobody. (Mixed, it would be 1 on every day: the start before the range
    // seen, the end inside it missed.)
    expect(values).toEqual(buckets.map(() => 0));
    // After it, a read that begins later sees all of it.
    const later = await readWorkforceSeries(h.db.pool, tenant.tenantId, {
      metric: 'headcount',
      monthly: false,
      buckets,
      department: 'snap',
    });
    expect(later).toEqual(buckets.map((b) => (b.start < at('2026-01-20T00:00:00Z') ? 1 : 0)));
  });

  it('the headcount at an instant sees one state of the counters and the versions', async () => {
    const { tenant } = await h.tenant();
    // At 20 January 12:00: the counters up to the 19th are read first, that day's versions after.
    const pool = interleaved(h.db.pool, oneEmployee(tenant.tenantId, 'snap'));
    expect(await readWorkforceAt(pool, tenant.tenantId, at('2026-01-20T12:00:00Z'))).toEqual({ headcount: 0, byDepartment: {} });
    expect(await readWorkforceAt(h.db.pool, tenant.tenantId, at('2026-01-20T12:00:00Z'))).toEqual({ headcount: 0, byDepartment: {} });
    expect(await readWorkforceAt(h.db.pool, tenant.tenantId, at('2026-01-19T12:00:00Z'))).toEqual({
      headcount: 1,
      byDepartment: { snap: 1 },
    });
  });
});
