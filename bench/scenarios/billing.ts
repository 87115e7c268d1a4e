/**
 * Billing / KPI-correctness benchmarks, each `{name, ours, baseline, ratio}`:
 *
 *   npm run bench -- billing
 *
 * Fresh database on DATABASE_URL's server (default local PostgreSQL), dropped afterwards; a fresh
 * Kafka topic on KAFKA_BROKERS (default 127.0.0.1:9092) for the watermark read.
 *
 * 1. billingReplay: BENCH_BILLING_EVENTS (default 20,000) billing events — customers of 10 events
 *    each (start, 7 plan changes, cancel, restart), ingested in batches of 1,000 with each
 *    customer's events in shuffled occurredAt order (late events everywhere) — then the
 *    kpi-billing projection replayed from the log. ours = the production projection (stores each
 *    fact, re-folds every touched customer in occurredAt order per page); baseline = a projection
 *    that only inserts the same facts (the floor: what storing the events costs at all).
 *    Alternating rounds, medians of events/s; ratio = ours ÷ baseline (1 = re-folding is free).
 * 2. kpiReadWatermark: `readKpiSummary` for one tenant holding all those customers, with the usage
 *    watermark from Kafka (topic end offsets via ListOffsets, reused ≤ 250 ms, vs the stored
 *    consumer offsets) = ours; without a usage source (no progress lookup) = baseline.
 *    Alternating rounds of 100 reads, medians of the per-round p50; ratio = baseline ÷ ours
 *    (1 = the watermark costs nothing).
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { createBenchDatabase } from '../support/database.ts';
import { createDatabasePool, sql } from '../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../shared/event-store/postgres/eventStore.ts';
import { createKafkaClient } from '../../shared/metrics-bus/kafkaClient.ts';
import { createKafkaSource } from '../../shared/metrics-bus/kafkaSource.ts';
import { storedBillingData, BILLING_STORED_TYPES } from '../../services/billing/contract.ts';
import { kpiBillingProjection } from '../../projections/kpi/billingProjection.ts';
import { readKpiSummary } from '../../projections/kpi/query.ts';
import { defineProjection } from '../../shared/projections/projection.ts';
import { replayProjection } from '../../shared/projections/replay.ts';
import { ingestBillingEvents, type BillingEventInput } from '../../services/billing/ingest.ts';
import { median } from '../support/measure.ts';

export type ScenarioResult = { name: string; ours: number; baseline: number; ratio: number; details?: Record<string, unknown> };

const say = (message: string) => process.stderr.write(`[bench billing] ${message}\n`);
const brokers = (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
const DAY = 86_400_000;

/** The baseline: the same facts inserted, nothing folded. */
const factsOnly = defineProjection({
  name: 'bench-billing-facts-only',
  version: 1,
  eventTypes: Object.values(BILLING_STORED_TYPES),
  tables: {
    bench_billing_facts: (t, named) => [
      sql.fragment`create table ${t} (
        tenant_id uuid not null, event_id text not null, customer_id text not null, type text not null,
        amount numeric(16, 4) not null, interval text not null, currency text not null, occurred_at timestamptz not null,
        log_commit numeric(20, 0) not null, log_prepare numeric(20, 0) not null,
        constraint ${named('pkey')} primary key (tenant_id, event_id))`,
      sql.fragment`create index ${named('customer')} on ${t} (tenant_id, customer_id)`,
    ],
  },
  async handle(tx, events, tables) {
    const rows = events.flatMap((e) => {
      const data = storedBillingData.safeParse(e.data);
      const tenantId = e.metadata.tenantId;
      if (!data.success || typeof tenantId !== 'string') return [];
      const d = data.data;
      return [
        [
          tenantId,
          d.eventId ?? e.id,
          d.customerId,
          e.type,
          d.amount,
          d.interval,
          d.currency,
          d.occurredAt,
          e.position.commit.toString(),
          e.position.prepare.toString(),
        ],
      ];
    });
    if (rows.length === 0) return;
    await tx.query(sql.type(z.object({}))`
      insert into ${tables.bench_billing_facts}
      select * from ${sql.unnest(rows, ['uuid', 'text', 'text', 'text', 'numeric', 'text', 'text', 'timestamptz', 'numeric', 'numeric'])}
      on conflict do nothing
    `);
  },
});

/** A customer's 10 facts: start, 7 changes, cancel, restart — returned in a shuffled order. */
function customerHistory(customerId: string, start: number, random: () => number): BillingEventInput[] {
  const at = (days: number) => new Date(start + days * DAY).toISOString();
  const fact = (type: BillingEventInput['type'], amount: string, days: number): BillingEventInput => ({
    eventId: `evt_${randomUUID().replace(/-/g, '')}`,
    type,
    customerId,
    amount,
    currency: 'EUR',
    interval: 'month',
    occurredAt: at(days),
  });
  const facts = [
    fact('subscription.started', '10', 0),
    ...Array.from({ length: 7 }, (_, i) => fact('subscription.changed', String(10 + i * 5), 10 + i * 10)),
    fact('subscription.cancelled', '0', 90),
    fact('subscription.started', '25', 100),
  ];
  for (let i = facts.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [facts[i], facts[j]] = [facts[j]!, facts[i]!];
  }
  return facts;
}

export async function runBillingBench(): Promise<ScenarioResult[]> {
  const total = Number(process.env.BENCH_BILLING_EVENTS ?? 20_000);
  const database = await createBenchDatabase('billing_bench');
  const pool = await createDatabasePool(database.url, { maximumPoolSize: 16 });
  const store = createPostgresEventStore(pool, { listenUrl: database.url });
  const topic = `usage-billing-bench-${randomUUID()}`;
  const admin = createKafkaClient(brokers, 'billing-bench-admin').admin();
  const head = createKafkaSource({ brokers, topic, groupId: `billing-bench-${randomUUID()}` });
  try {
    await replayProjection(pool, store, kpiBillingProjection);
    const tenantId = randomUUID();
    let seed = 42;
    const random = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
    const customers = Math.ceil(total / 10);
    const start = Date.now() - 200 * DAY;
    let ingested = 0;
    const began = performance.now();
    for (let c = 0; c < customers; c += 100) {
      const batch = Array.from({ length: Math.min(100, customers - c) }, (_, i) => customerHistory(`cus-${c + i}`, start, random)).flat();
      ingested += (await ingestBillingEvents(store, tenantId, 'bench', batch)).accepted;
    }
    say(`ingested ${ingested} billing events (${customers} customers) in ${((performance.now() - began) / 1000).toFixed(1)} s`);

    const rounds = 3;
    const ours: number[] = [];
    const floor: number[] = [];
    for (let round = 0; round < rounds; round++) {
      let t = performance.now();
      const a = await replayProjection(pool, store, kpiBillingProjection);
      ours.push(a.processed / ((performance.now() - t) / 1000));
      t = performance.now();
      const b = await replayProjection(pool, store, factsOnly);
      floor.push(b.processed / ((performance.now() - t) / 1000));
      say(`round ${round + 1}: re-fold ${ours.at(-1)!.toFixed(0)} events/s, facts only ${floor.at(-1)!.toFixed(0)} events/s`);
    }
    const replay: ScenarioResult = {
      name: `billing: kpi-billing replay of ${ingested.toLocaleString('en')} events (re-fold per customer) ÷ facts-only floor, events/s`,
      ours: Math.round(median(ours)),
      baseline: Math.round(median(floor)),
      ratio: Number((median(ours) / median(floor)).toFixed(3)),
      details: { rounds: ours.map((o, i) => ({ ours: Math.round(o), baseline: Math.round(floor[i]!) })) },
    };

    await admin.connect();
    await admin.createTopics({ topics: [{ topic, numPartitions: 4, replicationFactor: 1 }], waitForLeaders: true });
    const read = async (withWatermark: boolean, reads = 100) => {
      const latencies: number[] = [];
      for (let i = 0; i < reads; i++) {
        const t = performance.now();
        await readKpiSummary({ pool, eventStore: store, ...(withWatermark ? { usage: { source: head } } : {}) }, tenantId);
        latencies.push(performance.now() - t);
      }
      return median(latencies);
    };
    await read(true, 20);
    await read(false, 20);
    const withKafka: number[] = [];
    const without: number[] = [];
    for (let round = 0; round < rounds; round++) {
      withKafka.push(await read(true));
      without.push(await read(false));
    }
    const kpi = await readKpiSummary({ pool, eventStore: store, usage: { source: head } }, tenantId);
    say(
      `KPI read p50: with Kafka watermark ${median(withKafka).toFixed(2)} ms, without ${median(without).toFixed(2)} ms (mrr ${kpi.mrr}, ${customers} customers)`,
    );
    const watermark: ScenarioResult = {
      name: `billing: KPI summary read p50 without ÷ with the Kafka usage watermark (${customers.toLocaleString('en')} customers), ms`,
      ours: Number(median(withKafka).toFixed(2)),
      baseline: Number(median(without).toFixed(2)),
      ratio: Number((median(without) / median(withKafka)).toFixed(3)),
      details: { rounds: withKafka.map((o, i) => ({ ours: Number(o.toFixed(2)), baseline: Number(without[i]!.toFixed(2)) })) },
    };
    return [replay, watermark];
  } finally {
    await head.stop();
    await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
    await admin.disconnect().catch(() => undefined);
    await store.close();
    await pool.end();
    await database.drop();
  }
}
