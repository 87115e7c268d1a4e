import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { revenueSeries } from '../../../projections/kpi/series.ts';
import { foldCustomerHistory, revenueAsOf, type BillingFact } from '../../../projections/kpi/subscriptions.ts';

const DAY = 86_400_000;
const T0 = Date.UTC(2026, 0, 1);

const fact = fc.record({
  type: fc.constantFrom('subscription.started', 'subscription.changed', 'subscription.cancelled'),
  day: fc.integer({ min: 0, max: 120 }),
  amount: fc.integer({ min: 0, max: 500 }),
  interval: fc.constantFrom('month', 'year'),
});

describe('revenueSeries (the series fast path)', () => {
  describe('when customers start, change and cancel at random', () => {
    it('equals revenueAsOf (the snapshot definition) at every instant', () => {
      fc.assert(
        fc.property(
          fc.array(fc.array(fact, { maxLength: 8 }), { maxLength: 12 }),
          fc.array(fc.integer({ min: 0, max: 150 * 24 }), { minLength: 1, maxLength: 20 }),
          (customers, hours) => {
            const histories = customers.map((facts, c) => {
              const billing: BillingFact[] = facts.map((f, k) => ({
                eventId: `e-${c}-${k}`,
                type: f.type,
                customerId: `c${c}`,
                amount: String(f.amount),
                currency: 'EUR',
                interval: f.interval,
                occurredAt: new Date(T0 + f.day * DAY).toISOString(),
              }));
              return foldCustomerHistory(`c${c}`, billing).history;
            });
            const instants = hours.map((h) => T0 + h * 3_600_000);
            const fast = revenueSeries(histories, instants);
            instants.forEach((t, i) => expect(fast[i]).toEqual(revenueAsOf(histories, new Date(t))));
          },
        ),
        { numRuns: 200 },
      );
    });
  });
});
