import { createHash } from 'node:crypto';
import { z } from 'zod';
import { ConflictError, UnprocessableError, WrongExpectedRevisionError } from '../../shared/errors.ts';
import {
  comparePositions,
  type AppendRequest,
  type EventStore,
  type GlobalPosition,
  type NewEvent,
  type RecordedEvent,
} from '../../shared/event-store/port.ts';
import {
  BILLING_CURRENCY_FIXED,
  BILLING_EVENT_TYPES,
  BILLING_STORED_TYPES,
  DECIMAL_AMOUNT,
  apiTypeOf,
  billingCurrencyStreamId,
  billingStreamId,
  storedBillingData,
  type StoredBillingData,
} from './contract.ts';
import { parseAmount } from '../../shared/money.ts';
import { INSTANT_MAX_LENGTH } from '../../shared/validation.ts';

export const MAX_BILLING_BATCH = 1_000;

const amount = z
  .union([z.string().max(40), z.number()])
  .transform((v) => (typeof v === 'number' ? String(v) : v.trim()))
  .refine((v) => DECIMAL_AMOUNT.test(v), 'a non-negative decimal in major currency units with at most 4 decimal places, e.g. 49.99');

/**
 * The provider's own id (Stripe `evt_…`, Paddle, Chargebee, a uuid…): 1–255 printable
 * characters (code points): no control characters (so no NUL), no lone surrogates.
 */
export const billingEventId = z
  .string()
  .max(510) // 255 code points are at most 510 UTF-16 units: the documented maxLength
  .regex(/^[^\p{Cc}\p{Cs}]{1,255}$/u, '1 to 255 printable characters (no control characters or lone surrogates)')
  .describe("The billing provider's event id (e.g. Stripe's evt_…); idempotency key, unique within the tenant");

const MIN_INSTANT = Date.UTC(1970, 0, 1);
const MAX_INSTANT = Date.UTC(10_000, 0, 1); // exclusive: 9999-12-31T23:59:59.999Z is the last

/** An ISO 8601 instant with offset whose UTC value lies in years 1970–9999. */
export const billingInstant = z.iso
  .datetime({ offset: true })
  .max(INSTANT_MAX_LENGTH)
  .refine((v) => {
    const t = Date.parse(v);
    return Number.isFinite(t) && t >= MIN_INSTANT && t < MAX_INSTANT;
  }, 'an instant in the years 1970–9999 (UTC)');

export const billingEventInput = z
  .object({
    eventId: billingEventId,
    type: z.enum(BILLING_EVENT_TYPES),
    customerId: z
      .string()
      .min(1)
      .max(128)
      .regex(/^[A-Za-z0-9._:@-]+$/, 'letters, digits and . _ : @ -'),
    amount: amount.describe('Decimal, major currency units (49.99); the plan price per interval'),
    currency: z
      .string()
      .max(3)
      .regex(/^[A-Z]{3}$/, 'an ISO 4217 code such as EUR'),
    interval: z.enum(['month', 'year']),
    occurredAt: billingInstant,
  })
  // Strict like every request body (docs/versioning.md): a misspelt field is a 400, never dropped.
  .strict();
export type BillingEventInput = z.infer<typeof billingEventInput>;

export const billingEventsBody = z
  .object({
    events: z.array(billingEventInput).min(1).max(MAX_BILLING_BATCH),
  })
  .strict();

export type IngestResult = { readonly accepted: number; readonly duplicates: number; readonly position: GlobalPosition | null };

/**
 * The event-store id of a billing event: a name-based UUID (RFC 9562 §5.5, version 5) of the
 * provider's id in the tenant's namespace. The same provider id always maps to the same store
 * id within a tenant (the store's own idempotency applies), and two tenants using the same
 * provider id get different store ids (no collision, nothing learnt about the other tenant).
 * Hand-written: 10 lines over node:crypto, checked against RFC 9562's test vector; the `uuid`
 * package would add a dependency (and lockfile churn) for this one function.
 */
export function uuidV5(namespace: string, name: string): string {
  const ns = Buffer.from(namespace.replace(/-/g, ''), 'hex');
  if (ns.length !== 16) throw new RangeError(`not a uuid: ${namespace}`);
  const hash = createHash('sha1').update(ns).update(name, 'utf8').digest();
  hash[6] = (hash[6]! & 0x0f) | 0x50;
  hash[8] = (hash[8]! & 0x3f) | 0x80;
  const hex = hash.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

export const billingEventStoreId = (tenantId: string, providerEventId: string) => uuidV5(tenantId, `billing-event:${providerEventId}`);

const toStoredData = (e: BillingEventInput): StoredBillingData => ({
  eventId: e.eventId,
  customerId: e.customerId,
  amount: e.amount,
  currency: e.currency,
  interval: e.interval,
  occurredAt: new Date(e.occurredAt).toISOString(),
});

const toNewEvent = (tenantId: string, actor: string, e: BillingEventInput): NewEvent<string, StoredBillingData> => ({
  id: billingEventStoreId(tenantId, e.eventId),
  type: BILLING_STORED_TYPES[e.type],
  data: toStoredData(e),
  metadata: { tenantId, actor, occurredAt: new Date(e.occurredAt).toISOString() },
});

/** What makes two events with one eventId "the same event": every field, amounts and instants by value. */
type Payload = { type: string; customerId: string; amount: bigint; currency: string; interval: string; occurredAt: number };

const inputPayload = (e: BillingEventInput): Payload => ({
  type: e.type,
  customerId: e.customerId,
  amount: parseAmount(e.amount),
  currency: e.currency,
  interval: e.interval,
  occurredAt: Date.parse(e.occurredAt),
});

function storedPayload(event: RecordedEvent): { providerId: string; payload: Payload | undefined } {
  const data = storedBillingData.safeParse(event.data);
  if (!data.success) return { providerId: event.id, payload: undefined };
  const type = apiTypeOf(event.type);
  return {
    // Events recorded before provider ids were accepted had the (uuid) provider id as store id.
    providerId: data.data.eventId ?? event.id,
    payload: type && {
      type,
      customerId: data.data.customerId,
      amount: parseAmount(data.data.amount),
      currency: data.data.currency,
      interval: data.data.interval,
      occurredAt: Date.parse(data.data.occurredAt),
    },
  };
}

const samePayload = (a: Payload | undefined, b: Payload) =>
  a !== undefined &&
  a.type === b.type &&
  a.customerId === b.customerId &&
  a.amount === b.amount &&
  a.currency === b.currency &&
  a.interval === b.interval &&
  a.occurredAt === b.occurredAt;

const currencyFixedData = z.object({ currency: z.string() });

/**
 * The tenant's billing currency, fixed by its first billing event (stream
 * `billing-currency-<tenant>`, one event). A batch in another currency is refused with 422:
 * MRR is a sum, and summing EUR and USD without an exchange-rate policy would be wrong.
 * Returns the append that fixes it when it is not fixed yet (part of the batch's append, so a
 * refused batch fixes nothing), else nothing.
 */
async function currencyCheck(store: EventStore, tenantId: string, currency: string, actor: string): Promise<AppendRequest | undefined> {
  const streamId = billingCurrencyStreamId(tenantId);
  const [fixed] = await store.readStream(streamId, { maxCount: 1 });
  const current = fixed ? currencyFixedData.parse(fixed.data).currency : undefined;
  if (current === undefined) {
    return {
      streamId,
      events: [{ id: crypto.randomUUID(), type: BILLING_CURRENCY_FIXED, data: { currency }, metadata: { tenantId, actor } }],
      // Another request fixing it first makes this batch re-read and re-check (WrongExpectedRevision).
      expectedRevision: 'no_stream',
    };
  }
  if (current !== currency) {
    throw new UnprocessableError(`This tenant bills in ${current}; billing events in ${currency} are not accepted`, {
      errors: [{ path: 'events.currency', message: `must be ${current}` }],
    });
  }
  return undefined;
}

const conflictError = (conflicts: readonly { index: number; eventId: string }[]) =>
  new ConflictError(`${conflicts.length} event id(s) of this batch were already recorded with a different payload; nothing was recorded`, {
    errors: conflicts.map((c) => ({
      path: `events.${c.index}.eventId`,
      message: `already recorded with a different payload: ${c.eventId}`,
    })),
  });

/**
 * Records a batch of billing events, one stream per customer
 * (`billing-<tenant>-<customer>`), idempotently by the provider's `eventId` within the tenant:
 * - an eventId already recorded with the same payload (or repeated in the batch) is
 *   acknowledged as a duplicate and not appended again, so overlapping retries ([E1, E2] then
 *   [E2, E3]) simply append E3;
 * - an eventId already recorded (or repeated in the batch) with a different payload refuses the
 *   whole batch with 409, naming each such event, before anything is written;
 * - the fresh events of every customer (and, for a tenant's first batch, the event fixing its
 *   currency) are then appended in one atomic multi-stream append (`appendMany`), each stream
 *   at its expected revision: all of it is recorded or none. A concurrent writer on one of them
 *   makes the whole batch re-check and retry; an id the store already holds for another
 *   customer of the tenant fails the whole append (409).
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

  // Repeats inside the batch: the first occurrence counts, same-payload repeats are duplicates.
  const firstIndex = new Map<string, number>();
  const unique: { index: number; event: BillingEventInput; payload: Payload }[] = [];
  const conflicts: { index: number; eventId: string }[] = [];
  let repeated = 0;
  events.forEach((event, index) => {
    const payload = inputPayload(event);
    const first = firstIndex.get(event.eventId);
    if (first === undefined) {
      firstIndex.set(event.eventId, index);
      unique.push({ index, event, payload });
    } else if (samePayload(inputPayload(events[first]!), payload)) repeated++;
    else conflicts.push({ index, eventId: event.eventId });
  });
  if (conflicts.length > 0) throw conflictError(conflicts);

  const byCustomer = new Map<string, typeof unique>();
  for (const item of unique) byCustomer.set(item.event.customerId, [...(byCustomer.get(item.event.customerId) ?? []), item]);

  for (let attempt = 0; ; attempt++) {
    // Read every customer's stream (bounded by that customer's history), concurrently.
    const customers = [...byCustomer.entries()];
    const streams = new Map<string, RecordedEvent[]>();
    const queue = [...customers];
    await Promise.all(
      Array.from({ length: Math.min(8, queue.length) }, async () => {
        for (let next = queue.shift(); next; next = queue.shift()) {
          streams.set(next[0], await store.readStream(billingStreamId(tenantId, next[0])));
        }
      }),
    );

    let position: GlobalPosition | null = null;
    const later = (p: GlobalPosition) => {
      if (!position || comparePositions(p, position) > 0) position = p;
    };
    let duplicates = repeated;
    const requests: AppendRequest[] = [];
    const staleConflicts: { index: number; eventId: string }[] = [];
    for (const [customerId, items] of customers) {
      const existing = streams.get(customerId) ?? [];
      const known = new Map(existing.map((e) => [storedPayload(e).providerId, e]));
      const fresh: BillingEventInput[] = [];
      for (const { index, event, payload } of items) {
        const old = known.get(event.eventId);
        if (!old) fresh.push(event);
        else if (samePayload(storedPayload(old).payload, payload)) {
          duplicates++;
          later(old.position);
        } else staleConflicts.push({ index, eventId: event.eventId });
      }
      if (fresh.length > 0) {
        const last = existing.at(-1);
        requests.push({
          streamId: billingStreamId(tenantId, customerId),
          events: fresh.map((e) => toNewEvent(tenantId, actor, e)),
          expectedRevision: last ? last.revision : 'no_stream',
        });
      }
    }
    if (staleConflicts.length > 0) throw conflictError(staleConflicts.sort((a, b) => a.index - b.index));
    if (requests.length === 0) return { accepted: 0, duplicates, position };

    const accepted = requests.reduce((n, r) => n + r.events.length, 0);
    const fixCurrency = await currencyCheck(store, tenantId, currencies[0]!, actor);
    try {
      const results = await store.appendMany(fixCurrency ? [fixCurrency, ...requests] : requests);
      for (const r of results) later(r.position);
      return { accepted, duplicates, position };
    } catch (error) {
      // Another request appended to one of these customers meanwhile: re-read and re-decide.
      if (error instanceof WrongExpectedRevisionError && attempt < 4) continue;
      // The store holds one of these store ids in another stream: the eventId was already
      // recorded for another customer of this tenant (a different payload).
      if (error instanceof ConflictError) throw new ConflictError('An event id of this batch was already recorded for another customer');
      throw error;
    }
  }
}
