import { Registry } from 'prom-client';
import { testEmailHash } from '../../support/personalData.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace-node';
import { startTracing } from '../../../shared/telemetry/sdk.ts';
import { traceEventStore, traceProjection, type Tracing } from '../../../shared/telemetry/tracing.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { createGateway } from '../../../services/gateway/app.ts';
import { employeesCapability } from '../../../services/employees/capability.ts';
import { employeesProjection } from '../../../projections/employees/employeesProjection.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { authCapabilities, authHeaders, createTestAuth, provisionTenant } from '../../support/auth.ts';
import { waitFor } from '../../support/waitFor.ts';
import type { FastifyInstance } from 'fastify';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { testDataKeys } from '../../support/dataKeys.ts';

describe('when tracing is on', () => {
  const exporter = new InMemorySpanExporter();
  let tracing: Tracing;
  let db: TestDatabase;
  let store: EventStore;
  let projector: ProjectorHandle;
  let app: FastifyInstance;
  let auth: Awaited<ReturnType<typeof createTestAuth>>;

  beforeAll(async () => {
    tracing = startTracing({ serviceName: 'tracing-test', exporter });
    db = await createTestDatabase();
    store = traceEventStore(createPostgresEventStore(db.pool, { listenUrl: db.url }));
    projector = runProjection(db.pool, store, traceProjection(employeesProjection), { pollIntervalMs: 50 });
    await waitFor(() => readCheckpoint(db.pool, employeesProjection.name));
    auth = await createTestAuth(db.pool);
    app = await createGateway({
      config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
      readiness: [],
      registry: new Registry(),
      v1: authCapabilities(
        auth,
        employeesCapability({
          pool: db.pool,
          eventStore: store,
          log: store,
          logInDatabase: true,
          emailHash: testEmailHash,
          dataKeys: testDataKeys(db.pool),
        }),
      ),
      publicRoutes: [
        async (root) => {
          root.get('/boom', async () => {
            throw new Error('the service broke');
          });
        },
      ],
      tracing: tracing.fastifyPlugin,
    });
  });

  afterAll(async () => {
    await app?.close();
    await auth?.close();
    await projector?.stop();
    await store?.close();
    await db?.drop();
    await tracing?.shutdown();
  });

  it('one POST /v1/employees is one trace: the HTTP request, its appends, and the projector applying them', async () => {
    const tenant = await provisionTenant(db.pool);
    const headers = await authHeaders(auth, tenant, 'hr_manager');
    exporter.reset();
    const created = await app.inject({
      method: 'POST',
      url: '/v1/employees',
      headers,
      payload: { email: 'traced@example.test', firstName: 'Tracy', lastName: 'Span', department: 'ops' },
    });
    expect(created.statusCode).toBe(201);

    const spans = await waitFor(async () => {
      const all = exporter.getFinishedSpans();
      return all.some((s) => s.name === 'projection.apply employees') ? all : undefined;
    });
    const request = spans.find((s) => s.instrumentationScope.name === '@fastify/otel' && s.parentSpanContext === undefined);
    expect(request, `a root span for the request among ${spans.map((s) => s.name).join(', ')}`).toBeDefined();
    const traceId = request!.spanContext().traceId;
    const inTrace = spans.filter((s) => s.spanContext().traceId === traceId);
    const byId = new Map(inTrace.map((s) => [s.spanContext().spanId, s]));
    const descendsFromRequest = (span: ReadableSpan): boolean => {
      for (let at: ReadableSpan | undefined = span; at; at = byId.get(at.parentSpanContext?.spanId ?? '')) {
        if (at === request) return true;
      }
      return false;
    };

    const appends = inTrace.filter((s) => s.name === 'eventstore.append');
    expect(appends.length).toBeGreaterThanOrEqual(1);
    for (const append of appends) expect(descendsFromRequest(append)).toBe(true);
    expect(appends.flatMap((s) => s.attributes['eas.events.types'] as string[])).toContain('EmployeeHired');

    const apply = inTrace.find((s) => s.name === 'projection.apply employees');
    expect(apply, 'the projector span continues the request trace').toBeDefined();
    expect(descendsFromRequest(apply!)).toBe(true);

    const stored = await store.readAll({ eventTypes: ['EmployeeHired'] });
    const hired = stored.events.find((e) => (e.data as { email?: string }).email === 'traced@example.test');
    expect(hired?.metadata.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
  });

  it('a body refused as too large before any other work still has its request span', async () => {
    exporter.reset();
    const refused = await app.inject({
      method: 'POST',
      url: '/v1/employees',
      headers: { 'content-type': 'application/json' },
      payload: `{"email":"${'x'.repeat(2 * 1_048_576)}"}`,
    });
    expect(refused.statusCode).toBe(413);
    const request = await waitFor(() =>
      exporter.getFinishedSpans().find((s) => s.instrumentationScope.name === '@fastify/otel' && s.parentSpanContext === undefined),
    );
    expect(request.attributes['http.response.status_code']).toBe(413);
  });

  /** The spans of the one request `send` makes, once its root span ended, as the exporter has them. */
  async function requestSpans(send: () => Promise<unknown>): Promise<ReadableSpan[]> {
    exporter.reset();
    await send();
    const root = await waitFor(() =>
      exporter.getFinishedSpans().find((s) => s.instrumentationScope.name === '@fastify/otel' && s.parentSpanContext === undefined),
    );
    return exporter.getFinishedSpans().filter((s) => s.spanContext().traceId === root.spanContext().traceId);
  }

  const exported = (spans: readonly ReadableSpan[]) =>
    JSON.stringify(spans.map((s) => ({ name: s.name, attributes: s.attributes, status: s.status, events: s.events })));

  it('exports no address of a refused duplicate hire, and no exception for a client error', async () => {
    const tenant = await provisionTenant(db.pool);
    const headers = await authHeaders(auth, tenant, 'hr_manager');
    const payload = { email: 'taken.twice@example.test', firstName: 'First', lastName: 'Holder' };
    expect((await app.inject({ method: 'POST', url: '/v1/employees', headers, payload })).statusCode).toBe(201);

    const spans = await requestSpans(async () => {
      const again = await app.inject({ method: 'POST', url: '/v1/employees', headers, payload: { ...payload, firstName: 'Second' } });
      expect(again.statusCode).toBe(409);
      expect(again.json()).toMatchObject({ field: 'email' });
      expect(again.body).not.toContain('taken.twice');
    });
    expect(exported(spans)).not.toContain('taken.twice');
    // The request's spans, that is: the store's own span of the refused append records its conflict (no address in it).
    const http = spans.filter((s) => s.instrumentationScope.name === '@fastify/otel');
    expect(http.flatMap((s) => s.events.map((e) => e.name))).not.toContain('exception');
  });

  it("keeps a request's query string out of its span", async () => {
    const tenant = await provisionTenant(db.pool);
    const headers = await authHeaders(auth, tenant, 'hr_manager');
    const spans = await requestSpans(() => app.inject({ method: 'GET', url: '/v1/employees?email=queried@example.test', headers }));
    const root = spans.find((s) => s.parentSpanContext === undefined);
    expect(root?.attributes['url.path']).toBe('/v1/employees');
    expect(exported(spans)).not.toContain('queried');
  });

  it('still records the exception of a server error on the request span', async () => {
    const spans = await requestSpans(() => app.inject({ method: 'GET', url: '/boom' }));
    const root = spans.find((s) => s.parentSpanContext === undefined);
    expect(root?.attributes['http.response.status_code']).toBe(500);
    expect(root?.events.find((e) => e.name === 'exception')?.attributes?.['exception.message']).toBe('the service broke');
  });
});
