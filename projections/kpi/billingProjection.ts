import { z } from 'zod';
import { ignoredRows, sql, type Queryable } from '../../shared/db/pool.ts';
import { readModelTable } from '../../shared/db/rowLevelSecurity.ts';
import type { RecordedEvent } from '../../shared/event-store/port.ts';
import { defineProjection } from '../../shared/projections/projection.ts';
import {
  apiTypeOf,
  BILLING_STORED_TYPES,
  storedBillingData,
  DECIMAL_AMOUNT,
  BILLING_EVENT_TYPES,
} from '../../services/billing/contract.ts';
import { formatUnits } from '../../shared/money.ts';
import { foldCustomerHistory, type BillingFact } from './subscriptions.ts';

const factRow = z.object({
  customer_id: z.string(),
  event_id: z.string(),
  type: z.enum(BILLING_EVENT_TYPES),
  amount: z.string(),
  interval: z.enum(['month', 'year']),
  currency: z.string(),
  occurred_at: z.string(),
});
const tenantFactRow = factRow.extend({ tenant_id: z.string() });

type Fact = { tenantId: string; fact: BillingFact & { eventId: string }; commit: string; prepare: string };

/** A stored billing event → the fact it states, or undefined when it is not one of ours. */
function toFact(event: RecordedEvent): Fact | undefined {
  const type = apiTypeOf(event.type);
  const tenantId = event.metadata.tenantId;
  const data = storedBillingData.safeParse(event.data);
  if (!type || typeof tenantId !== 'string' || !data.success) return undefined;
  const occurred = Date.parse(data.data.occurredAt);
  // Events recorded before the edge checked instants (years 1970–9999), or otherwise unstorable: an
  // out-of-range instant or a malformed amount would fail its insert and stall the projection
  // for every tenant; they state nothing usable, so they are skipped (deterministically).
  if (!Number.isFinite(occurred) || occurred < 0 || occurred >= Date.UTC(10_000, 0, 1)) return undefined;
  if (!DECIMAL_AMOUNT.test(data.data.amount) || data.data.customerId.length === 0) return undefined;
  const { eventId = event.id, customerId, amount, currency, interval } = data.data;
  return {
    tenantId,
    fact: { eventId, type, customerId, amount, currency, interval, occurredAt: new Date(occurred).toISOString() },
    commit: event.position.commit.toString(),
    prepare: event.position.prepare.toString(),
  };
}

/**
 * Billing events → per tenant: every fact as recorded (kpi_billing_facts), and per customer the
 * state after all of them (kpi_subscriptions), its subscribed periods (kpi_subscription_periods)
 * and every MRR movement (kpi_mrr_movements), plus the tenant's currency (kpi_billing_tenants).
 *
 * Each batch first stores its facts, then re-folds every customer it touched from ALL of that
 * customer's stored facts in occurredAt order (ties in log order) and rewrites the customer's
 * rows. So a late event (a `cancelled` recorded before its `started`) changes the history where
 * it belongs, and the result depends only on the facts, never on arrival order or batching:
 * replaying twice changes nothing. A customer's history is small (its own subscription events),
 * so the re-fold is bounded by that customer, not by the tenant. Amounts stay `numeric`.
 *
 * Version 2: facts table, periods keyed by their ordinal (two periods may start at the same
 * instant: started/cancelled/started at T), movements keyed by the provider's event id.
 */
export const kpiBillingProjection = defineProjection({
  name: 'kpi-billing',
  version: 2,
  eventTypes: Object.values(BILLING_STORED_TYPES),
  tables: {
    kpi_billing_facts: (t, named) => [
      sql.fragment`create table ${t} (
        tenant_id uuid not null,
        event_id text not null,
        customer_id text not null,
        type text not null,
        amount numeric(16, 4) not null,
        interval text not null check (interval in ('month', 'year')),
        currency text not null,
        occurred_at timestamptz not null,
        log_commit numeric(20, 0) not null,
        log_prepare numeric(20, 0) not null,
        constraint ${named('pkey')} primary key (tenant_id, event_id)
      )`,
      sql.fragment`create index ${named('customer')} on ${t} (tenant_id, customer_id)`,
      ...readModelTable(t, named, 'read-write'),
    ],
    kpi_subscriptions: (t, named) => [
      sql.fragment`create table ${t} (
        tenant_id uuid not null,
        customer_id text not null,
        status text not null check (status in ('active', 'cancelled')),
        amount numeric(16, 4) not null,
        interval text not null check (interval in ('month', 'year')),
        currency text not null,
        mrr numeric not null,
        started_at timestamptz not null,
        cancelled_at timestamptz,
        updated_at timestamptz not null,
        constraint ${named('pkey')} primary key (tenant_id, customer_id)
      )`,
      ...readModelTable(t, named, 'read-write'),
    ],
    kpi_subscription_periods: (t, named) => [
      sql.fragment`create table ${t} (
        tenant_id uuid not null,
        customer_id text not null,
        ordinal integer not null,
        started_at timestamptz not null,
        ended_at timestamptz,
        constraint ${named('pkey')} primary key (tenant_id, customer_id, ordinal)
      )`,
      sql.fragment`create index ${named('started')} on ${t} (tenant_id, started_at)`,
      sql.fragment`create index ${named('ended')} on ${t} (tenant_id, ended_at)`,
      ...readModelTable(t, named, 'read-write'),
    ],
    kpi_mrr_movements: (t, named) => [
      sql.fragment`create table ${t} (
        tenant_id uuid not null,
        event_id text not null,
        customer_id text not null,
        occurred_at timestamptz not null,
        kind text not null check (kind in ('new', 'reactivation', 'expansion', 'contraction', 'churn')),
        arr_delta numeric not null,
        mrr_delta numeric not null,
        constraint ${named('pkey')} primary key (tenant_id, event_id)
      )`,
      sql.fragment`create index ${named('occurred')} on ${t} (tenant_id, occurred_at)`,
      sql.fragment`create index ${named('customer')} on ${t} (tenant_id, customer_id)`,
      ...readModelTable(t, named, 'read-write'),
    ],
    kpi_billing_tenants: (t, named) => [
      sql.fragment`create table ${t} (
        tenant_id uuid not null,
        currency text not null,
        constraint ${named('pkey')} primary key (tenant_id)
      )`,
      ...readModelTable(t, named, 'read-write'),
    ],
  },
  async handle(tx: Queryable, events, tables) {
    const facts = events.map(toFact).filter((f): f is Fact => f !== undefined);
    if (facts.length === 0) return;

    // 1. Record the facts. A provider id seen before for the tenant is kept as first recorded
    //    (the ingest refuses a different payload under a seen id; this only guards replays).
    await tx.query(sql.type(ignoredRows)`
      insert into ${tables.kpi_billing_facts}
        (tenant_id, event_id, customer_id, type, amount, interval, currency, occurred_at, log_commit, log_prepare)
      select * from ${sql.unnest(
        facts.map(({ tenantId, fact, commit, prepare }) => [
          tenantId,
          fact.eventId,
          fact.customerId,
          fact.type,
          fact.amount,
          fact.interval,
          fact.currency,
          fact.occurredAt,
          commit,
          prepare,
        ]),
        ['uuid', 'text', 'text', 'text', 'numeric', 'text', 'text', 'timestamptz', 'numeric', 'numeric'],
      )}
      on conflict (tenant_id, event_id) do nothing
    `);
    await tx.query(sql.type(ignoredRows)`
      insert into ${tables.kpi_billing_tenants} (tenant_id, currency)
      select distinct on (tenant_id) tenant_id, currency
      from ${sql.unnest(
        facts.map((f) => [f.tenantId, f.fact.currency]),
        ['uuid', 'text'],
      )} as f(tenant_id, currency)
      on conflict (tenant_id) do nothing
    `);

    // 2. Re-fold every touched customer from all its facts, in occurredAt then log order.
    const touched = new Map<string, { tenantId: string; customerId: string }>();
    for (const { tenantId, fact } of facts) touched.set(`${tenantId}|${fact.customerId}`, { tenantId, customerId: fact.customerId });
    const keys = [...touched.values()].map((c) => [c.tenantId, c.customerId]);
    const rows = await tx.any(sql.type(tenantFactRow)`
      select f.tenant_id::text, f.customer_id, f.event_id, f.type, f.amount::text, f.interval, f.currency, f.occurred_at
      from ${tables.kpi_billing_facts} f
      join ${sql.unnest(keys, ['uuid', 'text'])} as k(tenant_id, customer_id)
        on f.tenant_id = k.tenant_id and f.customer_id = k.customer_id
      order by f.tenant_id, f.customer_id, f.occurred_at, f.log_commit, f.log_prepare
    `);
    const byCustomer = new Map<string, BillingFact[]>();
    for (const row of rows) {
      const key = `${row.tenant_id}|${row.customer_id}`;
      const list = byCustomer.get(key) ?? [];
      list.push({
        eventId: row.event_id,
        type: row.type,
        customerId: row.customer_id,
        amount: row.amount,
        currency: row.currency,
        interval: row.interval,
        occurredAt: row.occurred_at,
      });
      byCustomer.set(key, list);
    }

    const subscriptions: unknown[][] = [];
    const periods: unknown[][] = [];
    const movements: unknown[][] = [];
    for (const [key, { tenantId, customerId }] of touched) {
      const folded = foldCustomerHistory(customerId, byCustomer.get(key) ?? []);
      const state = folded.state;
      if (state) {
        const last = state.periods.at(-1);
        subscriptions.push([
          tenantId,
          customerId,
          state.status,
          state.amount,
          state.interval,
          state.currency,
          last?.startedAt,
          last?.endedAt ?? null,
        ]);
      }
      state?.periods.forEach((p, ordinal) => periods.push([tenantId, customerId, ordinal, p.startedAt, p.endedAt]));
      for (const m of folded.movements) {
        movements.push([tenantId, m.eventId, customerId, m.occurredAt, m.kind, formatUnits(m.arrDeltaUnits)]);
      }
    }
    const customerKeys = sql.unnest(keys, ['uuid', 'text']);
    for (const table of [tables.kpi_subscription_periods, tables.kpi_mrr_movements, tables.kpi_subscriptions]) {
      await tx.query(sql.type(ignoredRows)`
        delete from ${table} t using ${customerKeys} as k(tenant_id, customer_id)
        where t.tenant_id = k.tenant_id and t.customer_id = k.customer_id
      `);
    }
    if (subscriptions.length > 0) {
      await tx.query(sql.type(ignoredRows)`
        insert into ${tables.kpi_subscriptions}
          (tenant_id, customer_id, status, amount, interval, currency, mrr, started_at, cancelled_at, updated_at)
        select tenant_id, customer_id, status, amount, interval, currency,
          case when status = 'active' then case when interval = 'year' then round(amount / 12, 6) else amount end else 0 end,
          started_at, cancelled_at, now()
        from ${sql.unnest(subscriptions, ['uuid', 'text', 'text', 'numeric', 'text', 'text', 'timestamptz', 'timestamptz'])}
          as s(tenant_id, customer_id, status, amount, interval, currency, started_at, cancelled_at)
      `);
    }
    if (periods.length > 0) {
      await tx.query(sql.type(ignoredRows)`
        insert into ${tables.kpi_subscription_periods} (tenant_id, customer_id, ordinal, started_at, ended_at)
        select * from ${sql.unnest(periods, ['uuid', 'text', 'int4', 'timestamptz', 'timestamptz'])}
      `);
    }
    if (movements.length > 0) {
      await tx.query(sql.type(ignoredRows)`
        insert into ${tables.kpi_mrr_movements} (tenant_id, event_id, customer_id, occurred_at, kind, arr_delta, mrr_delta)
        select tenant_id, event_id, customer_id, occurred_at, kind, arr_delta, round(arr_delta / 12, 6)
        from ${sql.unnest(movements, ['uuid', 'text', 'text', 'timestamptz', 'text', 'numeric'])}
          as m(tenant_id, event_id, customer_id, occurred_at, kind, arr_delta)
      `);
    }
  },
});
