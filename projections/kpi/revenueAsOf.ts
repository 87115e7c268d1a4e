import { z } from 'zod';
import { sql, type DatabaseTransactionConnection } from '../../shared/db/pool.ts';
import { divideRounded, parseAmount, unitsToNumber } from './money.ts';
import { CHURN_WINDOW_MS, summarizeRevenue, type CustomerSubscription } from './subscriptions.ts';

/**
 * MRR / ARR / churn *as of* past instants, for the series API and `kpi?at=` (SPEC §8).
 *
 * Minimal and separate on purpose: the billing projection's own as-of function (being made
 * correct for out-of-order events in another branch) should replace it. Until then:
 * - ARR at T = Σ `arr_delta` of `kpi_mrr_movements` with `occurred_at ≤ T` (exact numeric);
 *   mrr = arr / 12 rounded to 4 decimals, as the snapshot does.
 * - churn at T = `summarizeRevenue` over the customers' periods (`kpi_subscription_periods`),
 *   the snapshot's own definition; only the periods matter for churn.
 * Cost: one pass over the tenant's movements and periods up to the last point (billing
 * history, which does not grow with request traffic), then O(points × customers) in memory.
 */
export type RevenuePoint = { readonly mrr: number; readonly arr: number; readonly churnRate: number };

const movementRow = z.object({ occurred_at: z.string(), arr_delta: z.string() });
const periodRow = z.object({ customer_id: z.string(), started_at: z.string(), ended_at: z.string().nullable() });

export async function revenueAsOf(tx: DatabaseTransactionConnection, tenantId: string, instants: readonly number[]): Promise<RevenuePoint[]> {
  if (instants.length === 0) return [];
  const last = new Date(Math.max(...instants)).toISOString();
  const first = new Date(Math.min(...instants) - CHURN_WINDOW_MS).toISOString();
  const movements = await tx.any(sql.type(movementRow)`
    select occurred_at, sum(arr_delta)::text as arr_delta
    from kpi_mrr_movements where tenant_id = ${tenantId} and occurred_at <= ${last}
    group by occurred_at order by occurred_at
  `);
  const periods = await tx.any(sql.type(periodRow)`
    select customer_id, started_at, ended_at
    from kpi_subscription_periods
    where tenant_id = ${tenantId} and started_at <= ${last} and (ended_at is null or ended_at > ${first})
  `);
  const byCustomer = new Map<string, { startedAt: string; endedAt: string | null }[]>();
  for (const p of periods) {
    const list = byCustomer.get(p.customer_id) ?? [];
    list.push({ startedAt: p.started_at, endedAt: p.ended_at });
    byCustomer.set(p.customer_id, list);
  }
  const order = instants.map((t, i) => ({ t, i })).sort((a, b) => a.t - b.t);
  const out: RevenuePoint[] = new Array<RevenuePoint>(instants.length);
  let arrUnits = 0n;
  let m = 0;
  const at = movements.map((row) => Date.parse(row.occurred_at));
  for (const { t, i } of order) {
    while (m < movements.length && at[m]! <= t) arrUnits += parseAmount(movements[m++]!.arr_delta);
    // Periods that had started by t; a period ending after t is still open at t.
    const customers: CustomerSubscription[] = [];
    for (const [customerId, list] of byCustomer) {
      const seen = list
        .filter((p) => Date.parse(p.startedAt) <= t)
        .map((p) => (p.endedAt !== null && Date.parse(p.endedAt) > t ? { ...p, endedAt: null } : p));
      if (seen.length > 0) customers.push({ customerId, status: 'cancelled', amount: '0', interval: 'month', currency: '', periods: seen });
    }
    const { churnRate } = summarizeRevenue(customers, new Date(t));
    out[i] = { mrr: unitsToNumber(divideRounded(arrUnits, 12n)), arr: unitsToNumber(arrUnits), churnRate };
  }
  return out;
}
