import type { DatabasePool } from '../../shared/db/pool.ts';
import type { UsageSample } from '../../shared/metrics-bus/port.ts';
import { applySamples } from '../../projections/kpi/usageRollup.ts';
import type { BillingEventInput } from '../../services/billing/ingest.ts';

/** Synthetic usage and billing for the KPI scenarios: live samples, a seeded day, a seeded year. */

const lognormalMs = () => Math.exp(Math.log(12) + (Math.random() + Math.random() + Math.random() - 1.5) * 1.5);

export function liveSample(tenants: readonly string[], usersPerTenant: number): UsageSample {
  const t = Math.floor(Math.random() * tenants.length);
  return {
    tenantId: tenants[t]!,
    userId: `user-${t}-${Math.floor(Math.random() * usersPerTenant)}`,
    route: '/v1/employees/:id',
    method: 'GET',
    status: Math.random() < 0.01 ? 500 : 200,
    durationMs: lognormalMs(),
    timestamp: Date.now(),
  };
}

/** One seeded request of one of 1,000 users, at a random instant of the minute starting at `minuteStart`. */
const seededSample = (tenantId: string, minuteStart: number): UsageSample => ({
  tenantId,
  userId: `user-${Math.floor(Math.random() * 1_000)}`,
  route: '/v1/employees',
  method: 'GET',
  status: 200,
  durationMs: lognormalMs(),
  timestamp: minuteStart + Math.floor(Math.random() * 60_000),
});

/** Folds `total` samples spread evenly over the 24 h before `end` into the rollups, minute by minute. */
export async function seedTenant(pool: DatabasePool, tenantId: string, total: number, end: number) {
  const minutes = 1_440;
  const start = end - minutes * 60_000;
  let written = 0;
  let chunk: UsageSample[] = [];
  for (let m = 0; m < minutes; m++) {
    const count = Math.floor(((m + 1) * total) / minutes) - Math.floor((m * total) / minutes);
    for (let i = 0; i < count; i++) {
      chunk.push(seededSample(tenantId, start + m * 60_000));
    }
    if (chunk.length >= 400_000 || m === minutes - 1) {
      const batch = chunk;
      chunk = [];
      await pool.transaction((tx) => applySamples(tx, batch));
      written += batch.length;
    }
  }
  return written;
}

/** Folds `total` samples over the `days` days before `end`: each hour's share in one minute of it. */
export async function seedYear(pool: DatabasePool, tenantId: string, total: number, end: number, days: number) {
  const hours = days * 24;
  const start = end - hours * 3_600_000;
  let chunk: UsageSample[] = [];
  for (let h = 0; h < hours; h++) {
    const count = Math.floor(((h + 1) * total) / hours) - Math.floor((h * total) / hours);
    const minute = start + h * 3_600_000 + Math.floor(Math.random() * 60) * 60_000;
    for (let i = 0; i < count; i++) {
      chunk.push(seededSample(tenantId, minute));
    }
    if (chunk.length >= 400_000 || h === hours - 1) {
      const batch = chunk;
      chunk = [];
      await pool.transaction((tx) => applySamples(tx, batch));
    }
  }
}

/** 200 customers over the year: starts, plan changes and cancellations (about 450 billing events). */
export function billingYear(end: number): BillingEventInput[] {
  const events: BillingEventInput[] = [];
  const at = (daysAgo: number) => new Date(end - daysAgo * 86_400_000).toISOString();
  for (let c = 0; c < 200; c++) {
    const startedDaysAgo = 360 - c;
    const plan = { customerId: `cus-${c}`, currency: 'EUR', interval: c % 5 === 0 ? ('year' as const) : ('month' as const) };
    events.push({
      eventId: `evt-${c}-s`,
      type: 'subscription.started',
      amount: String(20 + (c % 7) * 10),
      occurredAt: at(startedDaysAgo),
      ...plan,
    });
    if (c % 3 === 0)
      events.push({
        eventId: `evt-${c}-c`,
        type: 'subscription.changed',
        amount: String(40 + (c % 7) * 10),
        occurredAt: at(startedDaysAgo - 30),
        ...plan,
      });
    if (c % 4 === 0)
      events.push({ eventId: `evt-${c}-x`, type: 'subscription.cancelled', amount: '0', occurredAt: at(startedDaysAgo - 90), ...plan });
  }
  return events.filter((e) => Date.parse(e.occurredAt) < end);
}
