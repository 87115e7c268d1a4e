import { z } from 'zod';
import { UnprocessableError, WrongExpectedRevisionError } from '../../shared/errors.ts';
import { comparePositions, type EventStore, type GlobalPosition, type NewEvent } from '../../shared/event-store/port.ts';
import {
  BILLING_CURRENCY_FIXED,
  BILLING_STORED_TYPES,
  billingCurrencyStreamId,
  billingStreamId,
  type StoredBillingData,
} from '../../projections/kpi/billingEvents.ts';
import { DECIMAL_AMOUNT } from '../../projections/kpi/money.ts';
import { BILLING_EVENT_TYPES } from '../../projections/kpi/subscriptions.ts';

export const MAX_BILLING_BATCH = 1_000;

const amount = z
  .union([z.string(), z.number()])
  .transform((v) => (typeof v === 'number' ? String(v) : v.trim()))
  .refine((v) => DECIMAL_AMOUNT.test(v), 'a non-negative decimal in major currency units with at most 4 decimal places, e.g. 49.99');

export const billingEventInput = z.object({
  eventId: z.uuid().describe('Idempotency key; becomes the event id in the event store'),
  type: z.enum(BILLING_EVENT_TYPES),
  customerId: z.string().min(1).max(128).regex(/^[A-Za-z0-9._:@-]+$/, 'letters, digits and . _ : @ -'),
  amount: amount.describe('Decimal, major currency units (49.99); the plan price per interval'),
  currency: z.string().regex(/^[A-Z]{3}$/, 'an ISO 4217 code such as EUR'),
  interval: z.enum(['month', 'year']),
  occurredAt: z.iso.datetime({ offset: true }),
});
export type BillingEventInput = z.infer<typeof billingEventInput>;

export const billingEventsBody = z.object({
  events: z.array(billingEventInput).min(1).max(MAX_BILLING_BATCH),
});

export type IngestResult = { readonly accepted: number; readonly duplicates: number; readonly position: GlobalPosition | null };

const toNewEvent = (tenantId: string, actor: string, e: BillingEventInput): NewEvent<string, StoredBillingData> => ({
  id: e.eventId,
  type: BILLING_STORED_TYPES[e.type],
  data: {
    customerId: e.customerId,
    amount: e.amount,
    currency: e.currency,
    interval: e.interval,
    occurredAt: new Date(e.occurredAt).toISOString(),
  },
  metadata: { tenantId, actor, occurredAt: new Date(e.occurredAt).toISOString() },
});

/**
 * The tenant's billing currency, fixed by its first billing event (stream
 * `billing-currency-<tenant>`, one event). A batch in another currency is refused with 422:
 * MRR is a sum, and summing EUR and USD without an exchange-rate policy would be wrong.
 */
async function ensureCurrency(store: EventStore, tenantId: string, currency: string, actor: string): Promise<void> {
  const stream = billingCurrencyStreamId(tenantId);
  for (let attempt = 0; attempt < 3; attempt++) {
    const [fixed] = await store.readStream(stream, { maxCount: 1 });
    const current = fixed ? z.object({ currency: z.string() }).parse(fixed.data).currency : undefined;
    if (current !== undefined) {
      if (current !== currency) {
        throw new UnprocessableError(`This tenant bills in ${current}; billing events in ${currency} are not accepted`, {
          errors: [{ path: 'events.currency', message: `must be ${current}` }],
        });
      }
      return;
    }
    try {
      await store.append(
        stream,
        [{ id: crypto.randomUUID(), type: BILLING_CURRENCY_FIXED, data: { currency }, metadata: { tenantId, actor } }],
        { expectedRevision: 'no_stream' },
      );
      return;
    } catch (error) {
      if (!(error instanceof WrongExpectedRevisionError)) throw error; // another request fixed it first: re-read
    }
  }
  throw new Error('could not fix the tenant billing currency');
}

/**
 * Appends a batch of billing events, one stream per customer (`billing-<tenant>-<customer>`),
 * idempotently: an eventId the customer's stream already holds, or that appears earlier in
 * the batch, is a duplicate and is not appended again. Customers are written concurrently;
 * each customer's events keep their batch order.
 */
export async function ingestBillingEvents(
  store: EventStore,
  tenantId: string,
  actor: string,
  events: readonly BillingEventInput[],
): Promise<IngestResult> {
  const currencies = [...new Set(events.map((e) => e.currency))];
  if (currencies.length > 1) {
    throw new UnprocessableError(`A batch must use one currency; it has ${currencies.join(', ')}`, {
      errors: [{ path: 'events.currency', message: 'all events of a tenant use one currency' }],
    });
  }
  await ensureCurrency(store, tenantId, currencies[0]!, actor);

  const seen = new Set<string>();
  let duplicates = 0;
  const byCustomer = new Map<string, BillingEventInput[]>();
  for (const e of events) {
    if (seen.has(e.eventId)) {
      duplicates++;
      continue;
    }
    seen.add(e.eventId);
    const list = byCustomer.get(e.customerId) ?? [];
    list.push(e);
    byCustomer.set(e.customerId, list);
  }

  let accepted = 0;
  let position: GlobalPosition | null = null;
  const later = (p: GlobalPosition) => {
    if (!position || comparePositions(p, position) > 0) position = p;
  };
  const appendCustomer = async (customerId: string, list: BillingEventInput[]) => {
    const stream = billingStreamId(tenantId, customerId);
    for (let attempt = 0; ; attempt++) {
      const existing = await store.readStream(stream);
      const known = new Map(existing.map((e) => [e.id, e]));
      const fresh = list.filter((e) => !known.has(e.eventId));
      for (const e of list) {
        const old = known.get(e.eventId);
        if (old) later(old.position);
      }
      if (fresh.length === 0) return { accepted: 0, duplicates: list.length };
      try {
        const last = existing.at(-1);
        const result = await store.append(
          stream,
          fresh.map((e) => toNewEvent(tenantId, actor, e)),
          { expectedRevision: last ? last.revision : 'no_stream' },
        );
        later(result.position);
        return { accepted: fresh.length, duplicates: list.length - fresh.length };
      } catch (error) {
        if (!(error instanceof WrongExpectedRevisionError) || attempt >= 4) throw error;
      }
    }
  };
  const work = [...byCustomer.entries()];
  const CONCURRENCY = 8;
  await Promise.all(
    Array.from({ length: Math.min(CONCURRENCY, work.length) }, async () => {
      for (let next = work.shift(); next; next = work.shift()) {
        const result = await appendCustomer(next[0], next[1]);
        accepted += result.accepted;
        duplicates += result.duplicates;
      }
    }),
  );
  return { accepted, duplicates, position };
}
