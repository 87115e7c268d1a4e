import { z } from 'zod';
import { sql, type DatabaseTransactionConnection } from '../../shared/db/pool.ts';
import { divideRounded, parseAmount, unitsToNumber } from '../../shared/money.ts';
import { CHURN_WINDOW_MS, revenueAsOf, type CustomerHistory, type RevenueKpis } from './subscriptions.ts';

/**
 * Revenue KPIs as of any instant, from the kpi-billing projection's stored history
 * (kpi_subscription_periods + kpi_mrr_movements). For the KPI summary (at `asOf`) and the KPI
 * series (one call per point, or one `loadRevenueHistories` over the whole range and the pure
 * `revenueAsOf` per point). Run inside `withTenant` (row-level security applies).
 */

const periodRow = z.object({ customer_id: z.string(), started_at: z.string(), ended_at: z.string().nullable() });
const movementRow = z.object({ customer_id: z.string(), occurred_at: z.string(), arr_delta: z.string() });
const arrRow = z.object({ arr: z.string() });

/**
 * The customers' histories that decide the revenue KPIs at every instant in [from, to]: their
 * periods that touch (from − 30 d, to] (enough for churn at any point of the range) and all
 * their movements up to `to` (a customer's ARR at t is the sum of its movements up to t).
 * Customers with nothing in the range but an open subscription before it are included (their
 * open period touches the range).
 */
export async function loadRevenueHistories(
  tx: DatabaseTransactionConnection,
  tenantId: string,
  range: { readonly from: Date; readonly to: Date },
  options: { readonly movements?: boolean } = {},
): Promise<CustomerHistory[]> {
  const windowStart = new Date(range.from.getTime() - CHURN_WINDOW_MS).toISOString();
  const to = range.to.toISOString();
  const periods = await tx.any(sql.type(periodRow)`
    select customer_id, started_at, ended_at from kpi_subscription_periods
    where tenant_id = ${tenantId} and started_at <= ${to} and (ended_at is null or ended_at > ${windowStart})
    order by customer_id, ordinal
  `);
  const customers = new Map<string, { periods: CustomerHistory['periods'][number][]; movements: CustomerHistory['movements'][number][] }>();
  for (const p of periods) {
    const entry = customers.get(p.customer_id) ?? { periods: [], movements: [] };
    entry.periods.push({ startedAt: p.started_at, endedAt: p.ended_at });
    customers.set(p.customer_id, entry);
  }
  if (customers.size === 0 || options.movements === false) return [...customers].map(([customerId, h]) => ({ customerId, ...h }));
  const movements = await tx.any(sql.type(movementRow)`
    select customer_id, occurred_at, arr_delta::text from kpi_mrr_movements
    where tenant_id = ${tenantId} and customer_id = any(${sql.array([...customers.keys()], 'text')}) and occurred_at <= ${to}
    order by customer_id, occurred_at
  `);
  for (const m of movements) {
    customers.get(m.customer_id)?.movements.push({ occurredAt: m.occurred_at, arrDeltaUnits: parseAmount(m.arr_delta) });
  }
  return [...customers].map(([customerId, h]) => ({ customerId, ...h }));
}

/**
 * MRR, ARR and churn of the tenant as of `at` (facts that occurred after `at` do not count).
 * Same answer as `revenueAsOf(await loadRevenueHistories(…, {from: at, to: at}), at)`, cheaper
 * for one instant: ARR is one `sum` in SQL (Σ every movement up to `at`; customers not active
 * at `at` sum to 0), so only the periods touching the churn window travel to Node.
 */
export async function readRevenueAsOf(tx: DatabaseTransactionConnection, tenantId: string, at: Date): Promise<RevenueKpis> {
  const histories = await loadRevenueHistories(tx, tenantId, { from: at, to: at }, { movements: false });
  const arr = await tx.oneFirst(sql.type(arrRow)`
    select coalesce(sum(arr_delta), 0)::text as arr from kpi_mrr_movements
    where tenant_id = ${tenantId} and occurred_at <= ${at.toISOString()}
  `);
  const arrUnits = parseAmount(arr);
  return { ...revenueAsOf(histories, at), mrr: unitsToNumber(divideRounded(arrUnits, 12n)), arr: unitsToNumber(arrUnits) };
}
