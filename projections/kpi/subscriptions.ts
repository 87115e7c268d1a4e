import { divideRounded, parseAmount, unitsToNumber } from './money.ts';

/**
 * Subscription state per customer and the revenue KPIs derived from it, as pure functions:
 * the billing projection folds events with `evolveCustomer`, the KPI query hands the stored
 * states to `summarizeRevenue`. No clock, no I/O.
 */
export const BILLING_EVENT_TYPES = ['subscription.started', 'subscription.changed', 'subscription.cancelled'] as const;
export type BillingEventType = (typeof BILLING_EVENT_TYPES)[number];
export type BillingInterval = 'month' | 'year';

export type BillingFact = {
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
export type MrrMovement = { readonly kind: MrrMovementKind; readonly arrDeltaUnits: bigint; readonly occurredAt: string };

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
  return { state: next, movement: kind === null ? null : { kind, arrDeltaUnits: delta, occurredAt: fact.occurredAt } };
}

export const CHURN_WINDOW_MS = 30 * 24 * 60 * 60 * 1000;

export type RevenueKpis = {
  readonly mrr: number;
  readonly arr: number;
  readonly churnRate: number;
  readonly activeCustomers: number;
  /** The churn fraction's parts, for explanation and docs. */
  readonly churn: { readonly churned: number; readonly activeAtStart: number; readonly newInWindow: number };
};

const activeAt = (periods: readonly SubscriptionPeriod[], t: number) =>
  periods.some((p) => Date.parse(p.startedAt) <= t && (p.endedAt === null || Date.parse(p.endedAt) > t));

/**
 * MRR, ARR and subscriber churn over the 30 days ending at `asOf`.
 * - arr = Σ annualised amounts of active customers (exact); mrr = arr / 12, both rounded to 4
 *   decimal places only at the end, so arr is exactly 12 × the unrounded mrr.
 * - churnRate = customers whose last subscription ended in (asOf − 30 d, asOf] and who are not
 *   active at asOf ÷ (customers active at asOf − 30 d + customers not active then who started
 *   in the window). Every churned customer is in the denominator, so the rate is in [0, 1];
 *   0 when the denominator is 0.
 */
export function summarizeRevenue(customers: readonly CustomerSubscription[], asOf: Date): RevenueKpis {
  const end = asOf.getTime();
  const start = end - CHURN_WINDOW_MS;
  let arrUnits = 0n;
  let activeCustomers = 0;
  let activeAtStart = 0;
  let newInWindow = 0;
  let churned = 0;
  for (const customer of customers) {
    if (customer.status === 'active') {
      arrUnits += annualUnits(customer.amount, customer.interval);
      activeCustomers++;
    }
    const wasActive = activeAt(customer.periods, start);
    const isActive = activeAt(customer.periods, end);
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
    if ((wasActive || startedInWindow) && endedInWindow && !isActive) churned++;
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
