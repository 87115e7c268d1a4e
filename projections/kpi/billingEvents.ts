import { z } from 'zod';
import type { BillingEventType } from './subscriptions.ts';

/**
 * The billing events as stored in the event store (past tense, one stream per tenant and
 * customer). The API's `subscription.*` names map onto these types.
 */
export const BILLING_STORED_TYPES = {
  'subscription.started': 'SubscriptionStarted',
  'subscription.changed': 'SubscriptionChanged',
  'subscription.cancelled': 'SubscriptionCancelled',
} as const satisfies Record<BillingEventType, string>;

export type StoredBillingType = (typeof BILLING_STORED_TYPES)[BillingEventType];

export const BILLING_CURRENCY_FIXED = 'BillingCurrencyFixed';

export const storedBillingData = z.object({
  /**
   * The billing provider's event id (e.g. Stripe's `evt_…`), unique within the tenant. The
   * event-store id is derived from it (`billingEventStoreId`). Absent in events recorded
   * before provider ids were accepted: their event-store id (a uuid) was the provider id.
   */
  eventId: z.string().optional(),
  customerId: z.string(),
  amount: z.string(),
  currency: z.string(),
  interval: z.enum(['month', 'year']),
  occurredAt: z.string(),
});
export type StoredBillingData = z.infer<typeof storedBillingData>;

export const billingStreamId = (tenantId: string, customerId: string) => `billing-${tenantId}-${customerId}`;
/** The tenant's billing currency: fixed by its first billing event, one event in this stream. */
export const billingCurrencyStreamId = (tenantId: string) => `billing-currency-${tenantId}`;

export function apiTypeOf(stored: string): BillingEventType | undefined {
  for (const [api, type] of Object.entries(BILLING_STORED_TYPES)) if (type === stored) return api as BillingEventType;
  return undefined;
}
