import type { IdentifierSqlToken } from 'slonik';
import { z } from 'zod';
import { sql, type DatabaseTransactionConnection } from '../../shared/db/pool.ts';
import { defineProjection } from '../runner/projection.ts';
import { apiTypeOf, BILLING_STORED_TYPES, storedBillingData } from './billingEvents.ts';
import { formatUnits } from './money.ts';
import { evolveCustomer, type CustomerSubscription, type SubscriptionPeriod } from './subscriptions.ts';

const noRows = z.object({});

const tenantScoped = (table: IdentifierSqlToken, policy: IdentifierSqlToken) => [
  sql.fragment`alter table ${table} enable row level security`,
  sql.fragment`alter table ${table} force row level security`,
  sql.fragment`create policy ${policy} on ${table} using (tenant_id = current_setting('app.tenant_id', true)::uuid)`,
  sql.fragment`grant select, insert, update, delete on ${table} to eas_tenant`,
];

const subscriptionRow = z.object({
  customer_id: z.string(),
  status: z.enum(['active', 'cancelled']),
  amount: z.string(),
  interval: z.enum(['month', 'year']),
  currency: z.string(),
  periods: z.array(z.object({ startedAt: z.string(), endedAt: z.string().nullable() })),
});

export const toCustomer = (row: z.infer<typeof subscriptionRow>): CustomerSubscription => ({
  customerId: row.customer_id,
  status: row.status,
  amount: row.amount,
  interval: row.interval,
  currency: row.currency,
  periods: row.periods.map((p) => ({
    startedAt: new Date(p.startedAt).toISOString(),
    endedAt: p.endedAt === null ? null : new Date(p.endedAt).toISOString(),
  })),
});
export { subscriptionRow };

/**
 * The columns of `subscriptionRow` for a customer row aliased `s`, with its periods as JSON
 * (only those still open or ended after `endedAfter`, when given).
 */
export const customerColumns = (periods: IdentifierSqlToken, endedAfter: string | null) => sql.fragment`
  s.customer_id, s.status, s.amount::text, s.interval, s.currency,
  coalesce((select json_agg(json_build_object('startedAt', p.started_at, 'endedAt', p.ended_at) order by p.started_at)
            from ${periods} p
            where p.tenant_id = s.tenant_id and p.customer_id = s.customer_id
              ${endedAfter === null ? sql.fragment`` : sql.fragment`and (p.ended_at is null or p.ended_at > ${endedAfter})`}), '[]'::json) as periods
`;

/**
 * Billing events → subscription state per customer (kpi_subscriptions), its periods
 * (kpi_subscription_periods, for churn), every MRR movement (kpi_mrr_movements, for
 * analysts) and the tenant's currency (kpi_billing_tenants). Amounts stay `numeric`.
 */
export const kpiBillingProjection = defineProjection({
  name: 'kpi-billing',
  version: 1,
  eventTypes: Object.values(BILLING_STORED_TYPES),
  tables: {
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
      ...tenantScoped(t, named('tenant')),
    ],
    kpi_subscription_periods: (t, named) => [
      sql.fragment`create table ${t} (
        tenant_id uuid not null,
        customer_id text not null,
        started_at timestamptz not null,
        ended_at timestamptz,
        constraint ${named('pkey')} primary key (tenant_id, customer_id, started_at)
      )`,
      sql.fragment`create index ${named('ended')} on ${t} (tenant_id, ended_at)`,
      ...tenantScoped(t, named('tenant')),
    ],
    kpi_mrr_movements: (t, named) => [
      sql.fragment`create table ${t} (
        tenant_id uuid not null,
        event_id uuid not null,
        customer_id text not null,
        occurred_at timestamptz not null,
        kind text not null check (kind in ('new', 'reactivation', 'expansion', 'contraction', 'churn')),
        arr_delta numeric not null,
        mrr_delta numeric not null,
        constraint ${named('pkey')} primary key (tenant_id, event_id)
      )`,
      sql.fragment`create index ${named('occurred')} on ${t} (tenant_id, occurred_at)`,
      ...tenantScoped(t, named('tenant')),
    ],
    kpi_billing_tenants: (t, named) => [
      sql.fragment`create table ${t} (
        tenant_id uuid not null,
        currency text not null,
        constraint ${named('pkey')} primary key (tenant_id)
      )`,
      ...tenantScoped(t, named('tenant')),
    ],
  },
  async handle(tx: DatabaseTransactionConnection, events, tables) {
    const customers = new Map<string, { tenantId: string; state: CustomerSubscription | undefined; changed: boolean }>();
    const load = async (tenantId: string, customerId: string) => {
      const key = `${tenantId}|${customerId}`;
      let entry = customers.get(key);
      if (!entry) {
        const row = await tx.maybeOne(sql.type(subscriptionRow)`
          select ${customerColumns(tables.kpi_subscription_periods, null)}
          from ${tables.kpi_subscriptions} s where s.tenant_id = ${tenantId} and s.customer_id = ${customerId}
        `);
        entry = { tenantId, state: row ? toCustomer(row) : undefined, changed: false };
        customers.set(key, entry);
      }
      return entry;
    };

    for (const event of events) {
      const type = apiTypeOf(event.type);
      const tenantId = event.metadata.tenantId;
      const data = storedBillingData.safeParse(event.data);
      if (!type || typeof tenantId !== 'string' || !data.success) continue; // not ours / malformed: skip, never stall
      const entry = await load(tenantId, data.data.customerId);
      const result = evolveCustomer(entry.state, { type, ...data.data });
      entry.state = result.state;
      entry.changed = true;
      await tx.query(sql.type(noRows)`
        insert into ${tables.kpi_billing_tenants} (tenant_id, currency) values (${tenantId}, ${data.data.currency})
        on conflict (tenant_id) do nothing
      `);
      if (result.movement) {
        const arr = formatUnits(result.movement.arrDeltaUnits);
        await tx.query(sql.type(noRows)`
          insert into ${tables.kpi_mrr_movements} (tenant_id, event_id, customer_id, occurred_at, kind, arr_delta, mrr_delta)
          values (${tenantId}, ${event.id}, ${data.data.customerId}, ${data.data.occurredAt}, ${result.movement.kind},
                  ${arr}::numeric, round(${arr}::numeric / 12, 6))
          on conflict do nothing
        `);
      }
    }

    for (const { tenantId, state, changed } of customers.values()) {
      if (!changed || !state) continue;
      const first: SubscriptionPeriod | undefined = state.periods[0];
      const last = state.periods.at(-1);
      await tx.query(sql.type(noRows)`
        insert into ${tables.kpi_subscriptions}
          (tenant_id, customer_id, status, amount, interval, currency, mrr, started_at, cancelled_at, updated_at)
        values (${tenantId}, ${state.customerId}, ${state.status}, ${state.amount}::numeric, ${state.interval}, ${state.currency},
          case when ${state.status} = 'active' then
            case when ${state.interval} = 'year' then round(${state.amount}::numeric / 12, 6) else ${state.amount}::numeric end
          else 0 end,
          ${last?.startedAt ?? first?.startedAt ?? null}, ${last?.endedAt ?? null}, now())
        on conflict (tenant_id, customer_id) do update set
          status = excluded.status, amount = excluded.amount, interval = excluded.interval, currency = excluded.currency,
          mrr = excluded.mrr, started_at = excluded.started_at, cancelled_at = excluded.cancelled_at, updated_at = now()
      `);
      await tx.query(sql.type(noRows)`
        delete from ${tables.kpi_subscription_periods} where tenant_id = ${tenantId} and customer_id = ${state.customerId}
      `);
      await tx.query(sql.type(noRows)`
        insert into ${tables.kpi_subscription_periods} (tenant_id, customer_id, started_at, ended_at)
        select ${tenantId}, ${state.customerId}, started_at, ended_at
        from ${sql.unnest(state.periods.map((p) => [p.startedAt, p.endedAt]), ['timestamptz', 'timestamptz'])} as p(started_at, ended_at)
      `);
    }
  },
});
