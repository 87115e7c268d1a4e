import { z } from 'zod';

/**
 * The billing capability's published contract: the events the ingest writes and the KPI
 * projection reads. The API names the three subscription events `subscription.*`.
 */
export const BILLING_EVENT_TYPES = ['subscription.started', 'subscription.changed', 'subscription.cancelled'] as const;
export type BillingEventType = (typeof BILLING_EVENT_TYPES)[number];
export type BillingInterval = 'month' | 'year';

/**
 * An event's amount: a non-negative decimal in major currency units with at most 4 decimal
 * places (the scale of shared/money.ts), as the API accepts it and the event stores it.
 */
export const DECIMAL_AMOUNT = /^(0|[1-9]\d{0,11})(\.\d{1,4})?$/;

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
