import { randomBytes, randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { Registry } from 'prom-client';
import { expect } from 'vitest';
import { createGateway } from '../../../services/gateway/app.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { gatewayRoutes } from '../../../services/processes/gateway.ts';
import { createSecretBox } from '../../../services/webhooks/secrets.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { sealedEventStore, testEmailHash } from '../personalData.ts';
import { START, type EventStore } from '../../../shared/event-store/port.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { allProjections } from '../../../services/projectors.ts';
import { createInProcessBus } from '../../../shared/metrics-bus/inProcess.ts';
import { createRateLimiter } from '../../../shared/rate-limit/limiter.ts';
import { createMemoryRateLimitStore } from '../../../shared/rate-limit/memory.ts';
import { createTestDatabase, type TestDatabase } from '../database.ts';
import { authHeaders, createTestAuth, createTestUser, provisionTenant, type TestTenant } from '../auth.ts';
import type { OpenApiDocument, Op, Operation } from './types.ts';
import { testDataKeys } from '../dataKeys.ts';

/**
 * The service under fuzzing: the gateway with the service's own capability list (`gatewayRoutes`,
 * as the gateway role mounts it) and the read side running, on a real database; two tenants, A
 * the caller and B whose data must never show up; and the document it serves. Module state, set by
 * `startTarget()` in a test file's beforeAll: each test file runs in a process of its own.
 */
const METHODS = ['get', 'post', 'put', 'patch', 'delete'] as const;

export let db: TestDatabase;
let store: EventStore;
export let auth: AuthDeps;
export let app: FastifyInstance;
let projectors: ProjectorHandle[] = [];
export let doc: OpenApiDocument;
export let ops: Op[];

/** Tenant A: the caller. Tenant B: the other tenant whose data must never show up. */
let tenantA: TestTenant;
export let tenantB: TestTenant;
export let headersA: Record<string, string>;
export const context: { employeeA?: string; employeeB?: string; roleA?: string; cursorA?: string } = {};
/** Strings only tenant B's data contains. */
export const secretsOfB: string[] = [];

export async function startTarget(): Promise<void> {
  db = await createTestDatabase();
  store = sealedEventStore(createPostgresEventStore(db.pool, { listenUrl: db.url }), db.pool).store;
  auth = await createTestAuth(db.pool);
  // The read side runs, as it does beside every gateway.
  projectors = allProjections.map((projection) => runProjection(db.pool, store, projection, { pollIntervalMs: 100 }));
  for (const projection of allProjections) await waitForCheckpoint(db.pool, projection.name, START, 60_000);
  const registry = new Registry();
  const logger = pino({ level: 'silent' });
  const bus = createInProcessBus();
  const rateLimiter = createRateLimiter({ store: createMemoryRateLimitStore(), failOpen: true, registry, logger });
  app = await createGateway({
    config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
    readiness: [],
    registry,
    ...gatewayRoutes({
      auth,
      pool: db.pool,
      eventStore: store,
      logStore: store,
      logInDatabase: true,
      dataKeys: testDataKeys(db.pool),
      emailHash: testEmailHash,
      rateLimiter,
      usagePublisher: bus.publisher,
      databaseUrl: db.url,
      // No target is allow-listed: a fuzzed webhook URL must never be called.
      webhooks: { secrets: createSecretBox(randomBytes(32)), allowHosts: [] },
    }),
  });

  // Enterprise: no rate limit in the way of the fuzzing (429 would still be an allowed answer).
  tenantA = await provisionTenant(db.pool, { plan: 'enterprise' });
  tenantB = await provisionTenant(db.pool, { plan: 'enterprise' });
  headersA = await authHeaders(auth, tenantA, 'admin');
  const headersB = await authHeaders(auth, tenantB, 'admin');

  const marker = `secret${randomBytes(6).toString('hex')}`;
  secretsOfB.push(tenantB.tenantId, `${marker}@example.test`, `${marker}First`, `${marker}Dept`, `${marker}-cus`);
  const b = await app.inject({
    method: 'POST',
    url: '/v1/employees',
    headers: headersB,
    payload: { email: `${marker}@example.test`, firstName: `${marker}First`, lastName: 'B', department: `${marker}Dept` },
  });
  expect(b.statusCode, b.body).toBe(201);
  context.employeeB = b.json<{ id: string }>().id;
  const billingB = await app.inject({
    method: 'POST',
    url: '/v1/analytics/billing-events',
    headers: headersB,
    payload: {
      events: [
        {
          eventId: randomUUID(),
          type: 'subscription.started',
          customerId: `${marker}-cus`,
          amount: '10',
          currency: 'EUR',
          interval: 'month',
          occurredAt: '2025-01-01T00:00:00Z',
        },
      ],
    },
  });
  expect(billingB.statusCode, billingB.body).toBe(202);
  await createTestUser(db.pool, tenantB, 'employee', { email: `${marker}.user@example.test` });

  const a = await app.inject({
    method: 'POST',
    url: '/v1/employees',
    headers: headersA,
    payload: { email: `fuzz-a-${randomBytes(4).toString('hex')}@example.test`, firstName: 'A', lastName: 'A' },
  });
  expect(a.statusCode, a.body).toBe(201);
  context.employeeA = a.json<{ id: string }>().id;
  const roles = await app.inject({ method: 'GET', url: '/v1/roles', headers: headersA });
  context.roleA = roles.json<{ data: Array<{ id: string; name: string }> }>().data.find((r) => r.name === 'employee')?.id;

  // A real cursor of tenant A's change feed, for operations that require one.
  const feed = await app.inject({ method: 'GET', url: '/v1/employees/changes', headers: headersA });
  if (feed.statusCode === 200) context.cursorA = feed.json<{ next?: string }>().next;

  const response = await app.inject({ method: 'GET', url: '/v1/openapi.json' });
  expect(response.statusCode).toBe(200);
  doc = response.json<OpenApiDocument>();
  ops = Object.entries(doc.paths).flatMap(([path, item]) =>
    METHODS.filter((m) => item[m]).map((method) => {
      const operation = item[method] as Operation;
      const documented = new Set(
        Object.keys(operation.responses ?? {})
          .map(Number)
          .filter(Number.isInteger),
      );
      return { method: method.toUpperCase(), path, operation, documented };
    }),
  );
}

export async function stopTarget(): Promise<void> {
  await app?.close();
  await auth?.close();
  for (const projector of projectors) await projector.stop();
  await store?.close();
  await db?.drop();
}
