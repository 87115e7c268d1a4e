import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  foldCustomerHistory,
  revenueAsOf,
  type BillingFact,
  type CustomerSubscription,
  type MrrMovement,
} from '../../../projections/kpi/subscriptions.ts';

// Window of every vector: the 30 days ending at ASOF, i.e. (2026-03-01T00:00Z, 2026-03-31T00:00Z].
const ASOF = new Date('2026-03-31T00:00:00Z');

type Given = Omit<BillingFact, 'currency'> & { currency?: string };
const fact = (f: Given): BillingFact => ({ currency: 'EUR', ...f });
const started = (customerId: string, amount: string, interval: 'month' | 'year', occurredAt: string) =>
  fact({ type: 'subscription.started', customerId, amount, interval, occurredAt });
const changed = (customerId: string, amount: string, interval: 'month' | 'year', occurredAt: string) =>
  fact({ type: 'subscription.changed', customerId, amount, interval, occurredAt });
const cancelled = (customerId: string, occurredAt: string) =>
  fact({ type: 'subscription.cancelled', customerId, amount: '0', interval: 'month', occurredAt });

/** Given these events (in log order), the customers' states, histories and the movements they caused. */
function given(events: readonly BillingFact[], at: Date = ASOF) {
  const byCustomer = new Map<string, BillingFact[]>();
  for (const e of events) byCustomer.set(e.customerId, [...(byCustomer.get(e.customerId) ?? []), e]);
  const folded = [...byCustomer].map(([customerId, facts]) => foldCustomerHistory(customerId, facts));
  const movements: MrrMovement[] = folded.flatMap((f) => f.movements);
  const states = folded.map((f) => f.state).filter((c): c is CustomerSubscription => c !== undefined);
  return {
    kpis: revenueAsOf(
      folded.map((f) => f.history),
      at,
    ),
    movements,
    states,
  };
}

describe('revenue KPIs (hand-computed vectors)', () => {
  describe('when there are no customers at all', () => {
    it('reports zero MRR, ARR and churn (empty denominator → 0)', () => {
      const { kpis } = given([]);
      expect(kpis).toMatchObject({ mrr: 0, arr: 0, churnRate: 0, activeCustomers: 0 });
    });
  });

  describe('when one customer pays 49.99 a month', () => {
    it('has MRR 49.99 and ARR 12 × 49.99 = 599.88', () => {
      const { kpis } = given([started('a', '49.99', 'month', '2026-01-10T00:00:00Z')]);
      expect(kpis).toMatchObject({ mrr: 49.99, arr: 599.88, churnRate: 0 });
    });
  });

  describe('when customers pay yearly', () => {
    it('normalises 1,200 a year to MRR 100, ARR 1,200', () => {
      expect(given([started('a', '1200', 'year', '2026-01-01T00:00:00Z')]).kpis).toMatchObject({ mrr: 100, arr: 1200 });
    });

    it('keeps ARR exact for 100 a year (MRR 8.3333 rounded, ARR exactly 100)', () => {
      expect(given([started('a', '100', 'year', '2026-01-01T00:00:00Z')]).kpis).toMatchObject({ mrr: 8.3333, arr: 100 });
    });

    it('adds monthly and yearly plans: 49.99/month + 120/year → MRR 59.99, ARR 719.88', () => {
      const { kpis } = given([started('a', '49.99', 'month', '2026-01-10T00:00:00Z'), started('b', '120', 'year', '2026-02-01T00:00:00Z')]);
      expect(kpis).toMatchObject({ mrr: 59.99, arr: 719.88, activeCustomers: 2 });
    });

    it('sums three yearly 0.10 plans without binary rounding (MRR 0.025, ARR 0.3)', () => {
      const { kpis } = given(['a', 'b', 'c'].map((c) => started(c, '0.10', 'year', '2026-01-01T00:00:00Z')));
      expect(kpis).toMatchObject({ mrr: 0.025, arr: 0.3 });
    });
  });

  describe('when a customer upgrades', () => {
    it('counts the new plan only and records new + expansion movements', () => {
      const { kpis, movements } = given([
        started('a', '10', 'month', '2026-01-05T00:00:00Z'),
        changed('a', '25', 'month', '2026-03-10T00:00:00Z'),
      ]);
      expect(kpis).toMatchObject({ mrr: 25, arr: 300, churnRate: 0 });
      expect(movements.map((m) => [m.kind, m.arrDeltaUnits])).toEqual([
        ['new', 1_200_000n], // 10 × 12 = 120.0000
        ['expansion', 1_800_000n], // (25 − 10) × 12 = 180.0000
      ]);
    });

    it('records a contraction when a 1,200/year plan becomes 50/month (ARR 600)', () => {
      const { kpis, movements } = given([
        started('a', '1200', 'year', '2026-01-05T00:00:00Z'),
        changed('a', '50', 'month', '2026-03-10T00:00:00Z'),
      ]);
      expect(kpis).toMatchObject({ mrr: 50, arr: 600 });
      expect(movements.at(-1)).toMatchObject({ kind: 'contraction', arrDeltaUnits: -6_000_000n });
    });
  });

  describe('when one of three customers active at the window start cancels in it', () => {
    it('has churn 1/3 and loses that customer from MRR', () => {
      const { kpis } = given([
        started('a', '10', 'month', '2026-01-01T00:00:00Z'),
        started('b', '20', 'month', '2026-02-01T00:00:00Z'),
        started('c', '240', 'year', '2026-02-01T00:00:00Z'),
        cancelled('a', '2026-03-15T00:00:00Z'),
      ]);
      // MRR = 20 + 240/12 = 40; churned a (1) ÷ (active at start a, b, c (3) + new 0).
      expect(kpis).toMatchObject({ mrr: 40, arr: 480, churnRate: 1 / 3 });
      expect(kpis.churn).toEqual({ churned: 1, activeAtStart: 3, newInWindow: 0 });
    });
  });

  describe('when a customer starts and cancels inside the window', () => {
    it('counts them as new and as churned: 1 ÷ (1 active at start + 1 new) = 0.5', () => {
      const { kpis } = given([
        started('b', '20', 'month', '2026-02-01T00:00:00Z'),
        started('d', '99', 'month', '2026-03-05T00:00:00Z'),
        cancelled('d', '2026-03-20T00:00:00Z'),
      ]);
      expect(kpis).toMatchObject({ mrr: 20, arr: 240, churnRate: 0.5 });
      expect(kpis.churn).toEqual({ churned: 1, activeAtStart: 1, newInWindow: 1 });
    });

    it('is churn 1 when that was the only customer', () => {
      const { kpis } = given([started('d', '99', 'month', '2026-03-05T00:00:00Z'), cancelled('d', '2026-03-20T00:00:00Z')]);
      expect(kpis).toMatchObject({ mrr: 0, arr: 0, churnRate: 1 });
    });
  });

  describe('when a cancellation happened before the window', () => {
    it('does not count it: churn 0 ÷ 1', () => {
      const { kpis } = given([
        started('e', '30', 'month', '2026-01-01T00:00:00Z'),
        cancelled('e', '2026-02-10T00:00:00Z'),
        started('b', '20', 'month', '2026-02-01T00:00:00Z'),
      ]);
      expect(kpis).toMatchObject({ mrr: 20, churnRate: 0 });
      expect(kpis.churn).toEqual({ churned: 0, activeAtStart: 1, newInWindow: 0 });
    });
  });

  describe('when a customer cancels and comes back within the window', () => {
    it('is not churned (their last subscription did not end) and records a reactivation', () => {
      const { kpis, movements } = given([
        started('f', '15', 'month', '2026-01-01T00:00:00Z'),
        cancelled('f', '2026-03-05T00:00:00Z'),
        started('f', '15', 'month', '2026-03-10T00:00:00Z'),
      ]);
      expect(kpis).toMatchObject({ mrr: 15, churnRate: 0 });
      expect(movements.map((m) => m.kind)).toEqual(['new', 'churn', 'reactivation']);
    });
  });

  describe('when events do not fit the state', () => {
    it('ignores a change or cancellation of a customer without an active subscription', () => {
      const { kpis, movements, states } = given([
        changed('x', '10', 'month', '2026-03-02T00:00:00Z'),
        cancelled('y', '2026-03-02T00:00:00Z'),
      ]);
      expect(states).toEqual([]);
      expect(movements).toEqual([]);
      expect(kpis).toMatchObject({ mrr: 0, churnRate: 0 });
    });

    it('treats a second "started" on an active customer as a plan change, not a new period', () => {
      const { states, movements } = given([
        started('a', '10', 'month', '2026-01-01T00:00:00Z'),
        started('a', '12', 'month', '2026-02-01T00:00:00Z'),
      ]);
      expect(states[0]?.periods).toHaveLength(1);
      expect(movements.map((m) => m.kind)).toEqual(['new', 'expansion']);
    });
  });
});

describe('each customer folds in occurredAt order, whatever order the events arrived in', () => {
  describe('when a cancellation arrives before its start', () => {
    it('still ends the subscription: MRR 0, one closed period, churn counted', () => {
      const { kpis, states } = given([cancelled('a', '2026-03-20T00:00:00Z'), started('a', '50', 'month', '2026-03-05T00:00:00Z')]);
      expect(states[0]).toMatchObject({
        status: 'cancelled',
        periods: [{ startedAt: '2026-03-05T00:00:00Z', endedAt: '2026-03-20T00:00:00Z' }],
      });
      expect(kpis).toMatchObject({ mrr: 0, arr: 0, churnRate: 1 });
    });
  });

  describe('when a plan change arrives before the start it follows', () => {
    it('applies the change on top of the start (MRR = the changed plan)', () => {
      const { kpis } = given([changed('a', '80', 'month', '2026-03-10T00:00:00Z'), started('a', '50', 'month', '2026-03-05T00:00:00Z')]);
      expect(kpis).toMatchObject({ mrr: 80 });
    });
  });

  it('gives the same periods, movements and KPIs whatever the arrival order (distinct instants)', () => {
    const events = fc.array(
      fc.record({
        type: fc.constantFrom('subscription.started' as const, 'subscription.changed' as const, 'subscription.cancelled' as const),
        amount: fc.integer({ min: 0, max: 100_000 }).map((cents) => (cents / 100).toFixed(2)),
        interval: fc.constantFrom('month' as const, 'year' as const),
      }),
      { maxLength: 25 },
    );
    fc.assert(
      fc.property(events, fc.integer(), (raw, seed) => {
        const facts = raw.map((e, i) =>
          fact({ ...e, customerId: 'a', occurredAt: new Date(Date.UTC(2026, 1, 1) + i * 3_600_000).toISOString() }),
        );
        const shuffled = [...facts].sort(
          (x, y) =>
            (((x.occurredAt.length * 31 + seed) ^ Date.parse(x.occurredAt)) % 7) -
            (((y.occurredAt.length * 31 + seed) ^ Date.parse(y.occurredAt)) % 7),
        );
        const inOrder = foldCustomerHistory('a', facts);
        const arrived = foldCustomerHistory('a', shuffled);
        expect(arrived.history).toEqual(inOrder.history);
        expect(revenueAsOf([arrived.history], ASOF)).toEqual(revenueAsOf([inOrder.history], ASOF));
      }),
    );
  });
});

describe('a duplicate period key (regression: it stalled the billing projection)', () => {
  describe('when a batch says started(T1), cancelled(T2), started(T1) for one customer', () => {
    it('folds deterministically to one period [T1, T2): the second start at T1 is a plan change', () => {
      const T1 = '2026-03-05T00:00:00Z';
      const T2 = '2026-03-09T00:00:00Z';
      const { states, kpis, movements } = given([started('a', '10', 'month', T1), cancelled('a', T2), started('a', '12', 'month', T1)]);
      expect(states[0]?.periods).toEqual([{ startedAt: T1, endedAt: T2 }]);
      expect(movements.map((m) => m.kind)).toEqual(['new', 'expansion', 'churn']);
      expect(kpis).toMatchObject({ mrr: 0, churnRate: 1 });
    });
  });

  describe('when a customer starts, cancels and starts again at the same instant', () => {
    it('has two periods starting at T (an empty one and an open one), and is active', () => {
      const T = '2026-03-05T00:00:00Z';
      const { states, kpis } = given([started('a', '10', 'month', T), cancelled('a', T), started('a', '10', 'month', T)]);
      expect(states[0]?.periods).toEqual([
        { startedAt: T, endedAt: T },
        { startedAt: T, endedAt: null },
      ]);
      expect(kpis).toMatchObject({ mrr: 10, churnRate: 0 });
    });
  });
});

describe('revenue as of an instant (MRR and churn as of asOf, not now)', () => {
  const history = [
    started('a', '10', 'month', '2026-01-01T00:00:00Z'),
    changed('a', '30', 'month', '2026-02-01T00:00:00Z'),
    started('b', '120', 'year', '2026-02-15T00:00:00Z'),
    cancelled('a', '2026-04-10T00:00:00Z'),
  ];

  it('counts only what had occurred by the instant', () => {
    expect(given(history, new Date('2026-01-15T00:00:00Z')).kpis).toMatchObject({ mrr: 10, activeCustomers: 1 });
    expect(given(history, new Date('2026-02-01T00:00:00Z')).kpis).toMatchObject({ mrr: 30, activeCustomers: 1 });
    expect(given(history, new Date('2026-03-01T00:00:00Z')).kpis).toMatchObject({ mrr: 40, arr: 480, activeCustomers: 2 });
    expect(given(history, new Date('2026-04-10T00:00:00Z')).kpis).toMatchObject({ mrr: 10, churnRate: 0.5 });
  });

  it('does not count a cancellation that occurs after the instant', () => {
    expect(given(history, ASOF).kpis).toMatchObject({ mrr: 40, churnRate: 0 });
  });
});

describe('revenue KPI properties', () => {
  const arbitraryEvents = fc.array(
    fc.record({
      type: fc.constantFrom('subscription.started' as const, 'subscription.changed' as const, 'subscription.cancelled' as const),
      customerId: fc.constantFrom('a', 'b', 'c', 'd'),
      amount: fc.integer({ min: 0, max: 10_000_00 }).map((cents) => (cents / 100).toFixed(2)),
      interval: fc.constantFrom('month' as const, 'year' as const),
      currency: fc.constant('EUR'),
      day: fc.integer({ min: 0, max: 120 }),
    }),
    { maxLength: 40 },
  );

  it('always has churn in [0, 1], ARR = 12 × MRR (to rounding), and MRR = Σ movements', () => {
    fc.assert(
      fc.property(arbitraryEvents, (raw) => {
        const events = raw
          .sort((x, y) => x.day - y.day)
          .map(({ day, ...e }) => ({ ...e, occurredAt: new Date(Date.UTC(2026, 0, 1) + day * 86_400_000).toISOString() }));
        const { kpis, movements } = given(events);
        expect(kpis.churnRate).toBeGreaterThanOrEqual(0);
        expect(kpis.churnRate).toBeLessThanOrEqual(1);
        expect(Math.abs(kpis.arr - 12 * kpis.mrr)).toBeLessThanOrEqual(0.0006);
        const movedUnits = movements
          .filter((m) => Date.parse(m.occurredAt) <= ASOF.getTime())
          .reduce((sum, m) => sum + m.arrDeltaUnits, 0n);
        expect(Number(movedUnits) / 10_000).toBeCloseTo(kpis.arr, 4);
      }),
    );
  });
});
