import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../../shared/db/pool.ts';
import { provisionTenant } from '../../../services/tenants/provision.ts';
import {
  connectQueueRedis,
  createReplayQueue,
  enqueueReplay,
  waitForReplayJob,
  type ReplayJobProgress,
} from '../../../services/worker/queue.ts';
import { createKafkaClient } from '../../../shared/metrics-bus/kafkaClient.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { startRole, type RoleProcess } from '../../support/roleProcesses.ts';

/**
 * The scaled-out topology as separate processes against shared PostgreSQL, Redis and real
 * Kafka: two gateways, one projector per projection, one worker.
 */
describe('when the service runs as separate processes', () => {
  let db: TestDatabase;
  let dataDir: string;
  const roles: RoleProcess[] = [];
  let gatewayA: RoleProcess;
  let gatewayB: RoleProcess;
  const suffix = randomUUID().slice(0, 8);
  const queuePrefix = `topo-${suffix}`;
  const tenants = { main: `topo-${suffix}`, limited: `topo-rl-${suffix}` };
  const admin = { email: `admin-${suffix}@example.com`, password: 'correct horse battery' };

  beforeAll(async () => {
    db = await createTestDatabase();
    dataDir = await mkdtemp(join(tmpdir(), 'eas-topology-'));
    await provisionTenant(db.pool, { slug: tenants.main, plan: 'pro', admin });
    await provisionTenant(db.pool, { slug: tenants.limited, plan: 'starter', admin });
    // The KPI projector subscribes at start; a topic nobody has written to yet does not exist.
    const kafkaAdmin = createKafkaClient((process.env.KAFKA_BROKERS ?? '').split(','), `topology-${suffix}`).admin();
    await kafkaAdmin.connect();
    await kafkaAdmin.createTopics({ topics: [{ topic: `usage-${suffix}`, numPartitions: 3 }], waitForLeaders: true });
    await kafkaAdmin.disconnect();
    const env = {
      DATABASE_URL: db.url,
      REDIS_URL: process.env.REDIS_URL ?? '',
      KAFKA_BROKERS: process.env.KAFKA_BROKERS ?? '',
      KAFKA_METRICS_TOPIC: `usage-${suffix}`,
      QUEUE_PREFIX: queuePrefix,
      DATA_DIR: dataDir, // shared: the gateways sign with the same generated key
      LOG_LEVEL: 'warn',
      RATE_LIMIT_FAIL_OPEN: 'false',
    };
    const started = await Promise.all([
      startRole('gateway-a', ['gateway'], env),
      startRole('projector-employees', ['projector', 'employees'], env),
      startRole('projector-kpi', ['projector', 'kpi'], env),
      startRole('worker', ['worker'], env),
    ]);
    roles.push(...started);
    gatewayA = started[0]!;
    gatewayB = await startRole('gateway-b', ['gateway'], env);
    roles.push(gatewayB);
  }, 300_000);

  afterAll(async () => {
    // Every role shuts down gracefully on SIGTERM (exit code 0).
    const codes = await Promise.all(roles.map(async (r) => [r.name, await r.stop(), r.output().slice(-1500)] as const));
    expect(codes.filter(([, code]) => code !== 0)).toEqual([]);
    const redis = connectQueueRedis(process.env.REDIS_URL ?? '');
    const keys = await redis.keys(`${queuePrefix}:*`);
    if (keys.length > 0) await redis.del(...keys);
    redis.disconnect();
    await db?.drop();
    await rm(dataDir, { recursive: true, force: true });
  }, 60_000);

  const login = async (gateway: RoleProcess, tenant: string) => {
    const response = await fetch(`${gateway.url}/v1/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-tenant': tenant },
      body: JSON.stringify(admin),
    });
    expect(response.status).toBe(200);
    return z.object({ accessToken: z.string() }).parse(await response.json()).accessToken;
  };
  const api =
    (gateway: RoleProcess, tenant: string, token: string) =>
    (path: string, init: RequestInit = {}) =>
      fetch(`${gateway.url}${path}`, {
        ...init,
        headers: { 'content-type': 'application/json', 'x-tenant': tenant, authorization: `Bearer ${token}`, ...init.headers },
      });

  it('reads through one gateway what was written through the other', async () => {
    const token = await login(gatewayA, tenants.main);
    const writeA = api(gatewayA, tenants.main, token);
    const readB = api(gatewayB, tenants.main, token);
    for (let i = 0; i < 5; i++) {
      const created = await writeA('/v1/employees', {
        method: 'POST',
        body: JSON.stringify({ email: `e${i}-${suffix}@example.com`, firstName: 'Ada', lastName: `Topo${i}`, department: 'eng' }),
      });
      expect(created.status).toBe(201);
      const position = created.headers.get('x-log-position');
      expect(position).toBeTruthy();
      const body = z.object({ id: z.string(), email: z.string() }).parse(await created.json());
      const read = await readB(`/v1/employees/${body.id}`, { headers: { 'x-min-position': position ?? '' } });
      expect(read.status).toBe(200);
      expect(read.headers.get('x-consistency')).toBe('consistent');
      expect(z.object({ email: z.string() }).parse(await read.json()).email).toBe(body.email);
    }
  });

  it('shares one rate limit between the gateways', async () => {
    const token = await login(gatewayA, tenants.limited);
    const statuses: Array<{ gateway: string; status: number }> = [];
    for (let i = 0; i < 24; i++) {
      const gateway = i % 2 === 0 ? gatewayA : gatewayB;
      const response = await api(gateway, tenants.limited, token)('/v1/roles');
      statuses.push({ gateway: gateway.name, status: response.status });
    }
    const ok = statuses.filter((s) => s.status === 200).length;
    // Starter: burst 10, refill 1/s. Two separate buckets would let about 20 through.
    expect(ok).toBeGreaterThanOrEqual(5);
    expect(ok).toBeLessThanOrEqual(14);
    expect(new Set(statuses.filter((s) => s.status === 429).map((s) => s.gateway))).toEqual(new Set(['gateway-a', 'gateway-b']));
  });

  it('completes a queued replay in the worker, and the swapped model equals the live one', async () => {
    const snapshot = () =>
      db.pool.anyFirst(sql.type(z.object({ row: z.string() }))`select to_jsonb(e)::text as row from employees e order by tenant_id, id`);
    const live = await snapshot();
    expect(live.length).toBeGreaterThanOrEqual(5);
    const redis = connectQueueRedis(process.env.REDIS_URL ?? '');
    const queue = createReplayQueue(redis, { prefix: queuePrefix });
    try {
      const progress: ReplayJobProgress[] = [];
      const id = await enqueueReplay(queue, 'employees');
      const job = await waitForReplayJob(queue, id, 60_000, (p) => progress.push(p));
      expect(job.state).toBe('completed');
      expect(job.progress).toMatchObject({ done: true, percent: 100 });
      expect(await snapshot()).toEqual(live);
    } finally {
      await queue.close();
      redis.disconnect();
    }
  });
});
