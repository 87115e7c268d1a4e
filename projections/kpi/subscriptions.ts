import type { BillingEventType, BillingInterval } from '../../services/billing/contract.ts';
import { divideRounded, parseAmount, unitsToNumber } from '../../shared/money.ts';

/**
 * Subscription state per customer and the revenue KPIs derived from it, as pure functions. No
 * clock, no I/O.
 *
 * - `foldCustomerHistory(facts)`: a customer's whole billing history → its subscription
 *   periods and MRR movements, folded in `occurredAt` order (ties in the order given, i.e. log
 *   order). The billing projection re-folds a customer from all its stored facts whenever one
 *   arrives, so a late event (a `cancelled` recorded before its `started`) lands where it
 *   belongs in time.
 * - `revenueAsOf(histories, at)`: MRR, ARR and subscriber churn **as of any instant** — the
 *   one function behind `GET /v1/analytics/kpi` (at `asOf`) and the KPI series (each point).
 *   Load the histories with `loadRevenueHistories` (`revenue.ts`), or call
 *   `readRevenueAsOf(tx, tenantId, at)` there for a single instant.
 */

export type BillingFact = {
  /** The provider's event id (movements are keyed by it); optional in pure tests. */
  readonly eventId?: string;
  readonly type: BillingEventType;
  readonly customerId: string;
  /** Decimal string, major currency units ("49.99"). */
  readonly amount: string;
  readonly currency: string;
  readonly interval: BillingInterval;
  /** ISO 8601 instant. */
  readonly occurredAt: string;
};

/** A stretch of time in which the customer had a subscription: [startedAt, endedAt). */
export type SubscriptionPeriod = { readonly startedAt: string; readonly endedAt: string | null };

export type CustomerSubscription = {
  readonly customerId: string;
  readonly status: 'active' | 'cancelled';
  readonly amount: string;
  readonly interval: BillingInterval;
  readonly currency: string;
  readonly periods: readonly SubscriptionPeriod[];
};

export type MrrMovementKind = 'new' | 'reactivation' | 'expansion' | 'contraction' | 'churn';

/** How one event moved the customer's recurring revenue (annualised, exact units of 10^-4). */
export type MrrMovement = {
  readonly kind: MrrMovementKind;
  readonly arrDeltaUnits: bigint;
  readonly occurredAt: string;
  /** The fact that caused it (its provider event id), when the fact had one. */
  readonly eventId?: string;
};

/** Annualised amount in exact units: a monthly plan counts 12 times, a yearly plan once. */
export function annualUnits(amount: string, interval: BillingInterval): bigint {
  const units = parseAmount(amount);
  switch (interval) {
    case 'month':
      return units * 12n;
    case 'year':
      return units;
    default: {
      const never: never = interval;
      throw new Error(`unknown interval ${String(never)}`);
    }
  }
}

const activeArr = (state: CustomerSubscription | undefined) =>
  state?.status === 'active' ? annualUnits(state.amount, state.interval) : 0n;

/**
 * Folds one billing event into a customer's state.
 * - started: opens a period (reactivation if the customer had one before); on an active
 *   customer it only replaces the plan (a duplicate "started" is a change, not a second period).
 * - changed: replaces the plan of an active customer; ignored for an inactive one.
 * - cancelled: closes the open period; ignored when nothing is open.
 */
export function evolveCustomer(
  state: CustomerSubscription | undefined,
  fact: BillingFact,
): { state: CustomerSubscription | undefined; movement: MrrMovement | null } {
  const before = activeArr(state);
  const plan = { amount: fact.amount, interval: fact.interval, currency: fact.currency };
  let next: CustomerSubscription | undefined;
  let kind: MrrMovementKind | null = null;
  switch (fact.type) {
    case 'subscription.started':
      if (state?.status === 'active') {
        next = { ...state, ...plan };
      } else {
        next = {
          customerId: fact.customerId,
          status: 'active',
          ...plan,
          periods: [...(state?.periods ?? []), { startedAt: fact.occurredAt, endedAt: null }],
        };
        kind = state ? 'reactivation' : 'new';
      }
      break;
    case 'subscription.changed':
      next = state?.status === 'active' ? { ...state, ...plan } : state;
      break;
    case 'subscription.cancelled':
      next =
        state?.status === 'active'
          ? {
              ...state,
              status: 'cancelled',
              periods: state.periods.map((p) => (p.endedAt === null ? { ...p, endedAt: fact.occurredAt } : p)),
            }
          : state;
      if (state?.status === 'active') kind = 'churn';
      break;
    default: {
      const never: never = fact.type;
      throw new Error(`unknown billing event ${String(never)}`);
    }
  }
  const delta = activeArr(next) - before;
  if (kind === null && delta !== 0n) kind = delta > 0n ? 'expansion' : 'contraction';
  if (kind === null) return { state: next, movement: null };
  const movement: MrrMovement = { kind, arrDeltaUnits: delta, occurredAt: fact.occurredAt };
  return { state: next, movement: fact.eventId === undefined ? movement : { ...movement, eventId: fact.eventId } };
}

/** What the revenue KPIs need of one customer: when it was subscribed, and how its ARR moved. */
export type CustomerHistory = {
  readonly customerId: string;
  /** Subscribed stretches [startedAt, endedAt), in order; endedAt null = still open. */
  readonly periods: readonly SubscriptionPeriod[];
  /** Every change of the customer's annualised revenue, in occurredAt order. */
  readonly movements: readonly Pick<MrrMovement, 'occurredAt' | 'arrDeltaUnits'>[];
};

export type FoldedCustomer = {
  /** The state after every fact (undefined if no fact ever opened a subscription). */
  readonly state: CustomerSubscription | undefined;
  readonly history: CustomerHistory;
  readonly movements: readonly MrrMovement[];
};

/**
 * Folds one customer's facts in `occurredAt` order. The sort is stable, so facts at the same
 * instant keep the order they are given in (the projection gives log order): a batch
 * `started(T1), cancelled(T2), started(T1)` folds as started, started (a plan change),
 * cancelled — one period [T1, T2), whatever order the facts arrived in. Deterministic: the same
 * facts in the same log order always give the same periods and movements.
 */
export function foldCustomerHistory(customerId: string, facts: readonly BillingFact[]): FoldedCustomer {
  const ordered = facts
    .map((fact, index) => ({ fact, index, t: Date.parse(fact.occurredAt) }))
    .sort((a, b) => a.t - b.t || a.index - b.index);
  let state: CustomerSubscription | undefined;
  const movements: MrrMovement[] = [];
  for (const { fact } of ordered) {
    const result = evolveCustomer(state, fact);
    state = result.state;
    if (result.movement) movements.push(result.movement);
  }
  return { state, movements, history: { customerId, periods: state?.periods ?? [], movements } };
}

export const CHURN_WINDOW_MS = 30 * 24 * 60 * 60 * 1000;

export type RevenueKpis = {
  readonly mrr: number;
  readonly arr: number;
  readonly churnRate: number;
  /** Customers with a subscription open at the instant. */
  readonly activeCustomers: number;
  /** The churn fraction's parts, for explanation and docs. */
  readonly churn: { readonly churned: number; readonly activeAtStart: number; readonly newInWindow: number };
};

const activeAt = (periods: readonly SubscriptionPeriod[], t: number) =>
  periods.some((p) => Date.parse(p.startedAt) <= t && (p.endedAt === null || Date.parse(p.endedAt) > t));

/** One customer at instant `at`: subscribed or not, and its annualised revenue (exact units). */
export function subscriptionAt(history: CustomerHistory, at: Date): { readonly active: boolean; readonly arrUnits: bigint } {
  const t = at.getTime();
  let arrUnits = 0n;
  for (const m of history.movements) if (Date.parse(m.occurredAt) <= t) arrUnits += m.arrDeltaUnits;
  return { active: activeAt(history.periods, t), arrUnits };
}

/**
 * MRR, ARR and subscriber churn as of instant `at` (facts that occurred after `at` do not
 * count; a customer's ARR at `at` is the sum of its movements up to `at`).
 * - arr = Σ annualised amounts of customers active at `at` (exact); mrr = arr / 12, both
 *   rounded to 4 decimal places only at the end, so arr is exactly 12 × the unrounded mrr.
 * - churnRate = customers whose last subscription ended in (at − 30 d, at] and who are not
 *   active at `at` ÷ (customers active at at − 30 d + customers not active then who started
 *   in the window). Every churned customer is in the denominator, so the rate is in [0, 1];
 *   0 when the denominator is 0.
 * Histories may be partial (only periods touching the window), as `loadRevenueHistories` loads
 * them, as long as the movements are complete up to `at`.
 */
export function revenueAsOf(customers: readonly CustomerHistory[], at: Date): RevenueKpis {
  const end = at.getTime();
  const start = end - CHURN_WINDOW_MS;
  let arrUnits = 0n;
  let activeCustomers = 0;
  let activeAtStart = 0;
  let newInWindow = 0;
  let churned = 0;
  for (const customer of customers) {
    const now = subscriptionAt(customer, at);
    arrUnits += now.arrUnits;
    if (now.active) activeCustomers++;
    const wasActive = activeAt(customer.periods, start);
    const startedInWindow = customer.periods.some((p) => {
      const t = Date.parse(p.startedAt);
      return t > start && t <= end;
    });
    const endedInWindow = customer.periods.some((p) => {
      if (p.endedAt === null) return false;
      const t = Date.parse(p.endedAt);
      return t > start && t <= end;
    });
    if (wasActive) activeAtStart++;
    else if (startedInWindow) newInWindow++;
    if ((wasActive || startedInWindow) && endedInWindow && !now.active) churned++;
  }
  const denominator = activeAtStart + newInWindow;
  return {
    mrr: unitsToNumber(divideRounded(arrUnits, 12n)),
    arr: unitsToNumber(arrUnits),
    churnRate: denominator === 0 ? 0 : churned / denominator,
    activeCustomers,
    churn: { churned, activeAtStart, newInWindow },
  };
}
