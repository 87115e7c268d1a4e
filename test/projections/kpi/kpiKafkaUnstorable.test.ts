import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql } from '../../../shared/db/pool.ts';
import { createKafkaClient } from '../../../shared/metrics-bus/kafkaClient.ts';
import { createKafkaSource } from '../../../shared/metrics-bus/kafkaSource.ts';
import { createUsageRollupSink } from '../../../projections/kpi/usageRollup.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * Messages on the usage topic that decode as JSON of the right shape but hold what the rollups
 * cannot store or must not count. Each used to fail its batch on every retry (the partition
 * stalled behind it) or to hold a KPI wrong until its far-off day. On the real broker, between
 * good messages: the good ones are applied, the others dropped with a warning, and the consumer
 * moves past them.
 */
const brokers = (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
const topic = `usage-samples-unstorable-${randomUUID()}`;
const group = `kpi-unstorable-${randomUUID()}`;
const kafka = createKafkaClient(brokers, 'kpi-unstorable-test');
const admin = kafka.admin();
const producer = kafka.producer();
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 1, replicationFactor: 1 }], waitForLeaders: true });
  await producer.connect();
});
afterAll(async () => {
  await producer.disconnect();
  await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
  await admin.disconnect();
  await db?.drop();
});

describe('when the usage topic holds samples the rollups cannot store', () => {
  it('applies the good samples around them, drops them with a warning and does not stall', async () => {
    const tenant = randomUUID();
    const now = Date.now();
    const message = (tenantId: string, ...tuples: unknown[][]) => ({
      key: tenantId,
      value: JSON.stringify({ v: 1, t: tenantId, s: tuples }),
    });
    const good = (userId: string) => [userId, '/v1/employees', 'GET', 200, 12, now];
    // Each bad sample travels beside a good one of the same tenant: only the bad one is dropped.
    await producer.send({
      topic,
      messages: [
        message(tenant, good('first')),
        message('not-a-uuid', good('other tenant')),
        message(tenant, ['nul\u0000', '/r', 'GET', 200, 1, now], good('beside-nul')),
        message(tenant, ['\ud800', '/r', 'GET', 200, 1, now], ['\ud801', '/r', 'GET', 200, 1, now], good('beside-surrogates')),
        message(tenant, ['u', '/r', 'GET', 200, 1, Date.UTC(10_000, 0, 1)], good('beside-year-10000')),
        message(tenant, ['u', '/r', 'GET', 200, 1, now + 24 * 3_600_000], good('beside-tomorrow')),
        message(tenant, ['u', '/r', 'GET', 200, 1e307, now], good('beside-huge-duration')),
        message(tenant, good('last')),
      ],
    });
    const warnings: Array<{ invalid?: number; dropped?: number }> = [];
    const logger = {
      info: () => undefined,
      error: () => undefined,
      warn: (obj: object) => void warnings.push(obj),
    };
    const source = createKafkaSource({ brokers, topic, groupId: group, logger });
    await source.start(createUsageRollupSink(db.pool, { group }));
    try {
      const applied = await waitFor(async () => {
        const row = await db.pool.maybeOne(sql.type(z.object({ next_offset: z.string(), samples: z.number() }))`
          select o.next_offset::text, u.samples from kpi_kafka_offsets o, kpi_tenant_usage u
          where o.consumer_group = ${group} and o.topic = ${topic} and u.tenant_id = ${tenant}
        `);
        return row?.next_offset === '8' ? row : undefined;
      });
      expect(applied.samples).toBe(7);
      const users = await db.pool.anyFirst(
        sql.type(z.object({ user_id: z.string() }))`select user_id from kpi_user_activity where tenant_id = ${tenant} order by user_id`,
      );
      expect(users).toEqual([
        'beside-huge-duration',
        'beside-nul',
        'beside-surrogates',
        'beside-tomorrow',
        'beside-year-10000',
        'first',
        'last',
      ]);
      expect(warnings.reduce((sum, w) => sum + (w.invalid ?? 0), 0)).toBe(1);
      expect(warnings.reduce((sum, w) => sum + (w.dropped ?? 0), 0)).toBe(6);
    } finally {
      await source.stop();
    }
  });
});
