import { randomBytes, randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { testEmailHash } from '../../support/personalData.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import type { UsageSample, UsageSamplePublisher } from '../../../shared/metrics-bus/port.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { changesProjection } from '../../../projections/changes/changesProjection.ts';
import { employeesProjection } from '../../../projections/employees/employeesProjection.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { usageSamples } from '../../../services/analytics/usageSamples.ts';
import { changesCapability } from '../../../services/changes/capability.ts';
import { employeesCapability } from '../../../services/employees/capability.ts';
import { START_CURSOR } from '../../../services/changes/cursor.ts';
import { webhooksCapability } from '../../../services/webhooks/capability.ts';
import { acquireLease } from '../../../services/webhooks/lease.ts';
import { createSecretBox } from '../../../services/webhooks/secrets.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { authHeaders, createTestApp, createTestAuth, provisionTenant } from '../../support/auth.ts';
import { waitFor } from '../../support/waitFor.ts';
import { testDataKeys } from '../../support/dataKeys.ts';

// The API latency KPI is the time the service worked: a client that asks it to wait (the feed's
// long-poll, read-your-writes, a replay's hand-off) must not turn its waiting into latency.
let db: TestDatabase;
let store: EventStore;
let auth: AuthDeps;
let app: FastifyInstance;
let projectors: ProjectorHandle[];
const samples: UsageSample[] = [];
const publisher: UsageSamplePublisher = {
  publish: (sample) => void samples.push(sample),
  flush: async () => undefined,
  close: async () => undefined,
};

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  projectors = [
    runProjection(db.pool, store, changesProjection, { pollIntervalMs: 100 }),
    runProjection(db.pool, store, employeesProjection, { pollIntervalMs: 100 }),
  ];
  await waitFor(() => readCheckpoint(db.pool, changesProjection.name));
  await waitFor(() => readCheckpoint(db.pool, employeesProjection.name));
  auth = await createTestAuth(db.pool);
  app = await createTestApp(
    auth,
    usageSamples(publisher),
    changesCapability({ pool: db.pool, databaseUrl: db.url }),
    // A position far beyond the log is never reached: the read waits its whole bound.
    employeesCapability(
      { pool: db.pool, eventStore: store, log: store, logInDatabase: true, emailHash: testEmailHash, dataKeys: testDataKeys(db.pool) },
      { readWaitMs: 1_500 },
    ),
    webhooksCapability({ pool: db.pool, secrets: createSecretBox(randomBytes(32)), targets: { allowHosts: ['127.0.0.1'] } }),
  );
});

afterAll(async () => {
  await app?.close();
  await Promise.all((projectors ?? []).map((p) => p.stop()));
  await auth?.close();
  await store?.close();
  await db?.drop();
});

const sampleOf = (route: string) => waitFor(() => samples.find((s) => s.route === route));

describe('the latency recorded for a request that waits on purpose', () => {
  it('leaves out the long-poll of the change feed', async () => {
    const headers = await authHeaders(auth, await provisionTenant(db.pool), 'employee');
    const started = performance.now();
    const response = await app.inject({ method: 'GET', url: '/v1/employees/changes?limit=5&wait=2', headers });
    expect(response.statusCode, response.body).toBe(200);
    expect(performance.now() - started).toBeGreaterThanOrEqual(1_900);
    const sample = await sampleOf('/v1/employees/changes');
    expect(sample.durationMs).toBeLessThan(1_000);
  });

  it('leaves out the wait for X-Min-Position', async () => {
    const headers = await authHeaders(auth, await provisionTenant(db.pool), 'employee');
    const started = performance.now();
    const response = await app.inject({
      method: 'GET',
      url: '/v1/employees',
      headers: { ...headers, 'x-min-position': '999999999-999999999' },
    });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.headers['x-consistency']).toBe('stale');
    expect(performance.now() - started).toBeGreaterThanOrEqual(1_400);
    const sample = await sampleOf('/v1/employees');
    expect(sample.durationMs).toBeLessThan(1_000);
  });

  it("leaves out a replay's wait for the delivery in flight to let go", async () => {
    const tenant = await provisionTenant(db.pool);
    const headers = await authHeaders(auth, tenant, 'admin');
    const created = await app.inject({
      method: 'POST',
      url: '/v1/webhooks',
      headers,
      payload: { url: 'http://127.0.0.1:9/hook', events: ['employee.hired'], after: START_CURSOR },
    });
    expect(created.statusCode, created.body).toBe(201);
    const endpointId = created.json<{ id: string }>().id;
    // A delivery run holds the lease and never lets go (its worker died): the replay waits
    // until the lease runs out.
    expect(await acquireLease(db.pool, tenant.tenantId, endpointId, randomUUID(), 1_500)).not.toBeNull();
    const started = performance.now();
    const response = await app.inject({
      method: 'POST',
      url: `/v1/webhooks/${endpointId}/replay`,
      headers,
      payload: { after: START_CURSOR },
    });
    expect(response.statusCode, response.body).toBe(202);
    expect(performance.now() - started).toBeGreaterThanOrEqual(1_200);
    const sample = await sampleOf('/v1/webhooks/:id/replay');
    expect(sample.durationMs).toBeLessThan(1_000);
  });
});
