import pg from 'pg';
import { randomUUID } from 'node:crypto';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql, type DatabasePool } from '../../../shared/db/pool.ts';
import { START, type EventStore, type NewEvent } from '../../../shared/event-store/port.ts';
import { createGateway } from '../../../services/gateway/app.ts';
import { employeesProjection } from '../../../projections/employees/employeesProjection.ts';
import { listEmployees } from '../../../projections/employees/queries.ts';
import { defineProjection } from '../../../shared/projections/projection.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import {
  RebuildInProgressError,
  listParkedEvents,
  replayLockKey,
  resolveParkedEvents,
  retryParkedEvents,
} from '../../../shared/projections/parking.ts';
import { parkedEventsReadiness, registerParkedEventsMetric } from '../../../shared/projections/monitoring.ts';
import { useTestEventStore } from '../../support/database.ts';
import { runOpsWith } from '../../support/processes.ts';
import { hire, statusChanged } from '../../support/projections/employeeEvents.ts';

/** The ops CLI against this test's database alone (no Redis, Kafka or EventStoreDB). */
const opsEnv = (url: string) => ({
  ...process.env,
  DATABASE_URL: url,
  REDIS_URL: '',
  KAFKA_BROKERS: '',
  EVENTSTORE_URL: '',
  LOG_LEVEL: 'silent',
});

const listIds = async (pool: DatabasePool, tenantId: string) =>
  (await listEmployees(pool, tenantId, { page: 1, limit: 100 })).data.map((e) => e.id);

async function startBuilt(run: () => ProjectorHandle, pool: DatabasePool, name: string): Promise<ProjectorHandle> {
  const handle = run();
  if (!(await waitForCheckpoint(pool, name, START, 20_000))) throw new Error(`${name} was not built`);
  return handle;
}

describe('when a poison event for one tenant is in the log', () => {
  const fixture = useTestEventStore();
  let projector: ProjectorHandle;
  const parkedLog: string[] = [];
  const tenantA = randomUUID();
  const tenantB = randomUUID();
  let poison: ReturnType<typeof hire>;

  beforeAll(async () => {
    projector = await startBuilt(
      () =>
        runProjection(fixture.db.pool, fixture.store, employeesProjection, {
          pollIntervalMs: 250,
          onParked: (event, error) => parkedLog.push(`${event.id} ${error}`),
        }),
      fixture.db.pool,
      employeesProjection.name,
    );
  });
  afterAll(async () => {
    await projector?.stop();
  });

  it('a hire date in year 0 no longer stalls the employees projection; with it in the log, tenant B sees its writes within 1 s', async () => {
    const { db, store } = fixture;
    // Straight to the store: the gateway's validation is not what is under test here.
    poison = hire(tenantA, '0000-06-01T00:00:00Z');
    await store.append(poison.stream, [poison.event]);
    await store.append(poison.stream, [statusChanged(tenantA, poison.employeeId, 'on_leave')]);
    const fine = hire(tenantA, '2024-01-01T00:00:00Z');
    await store.append(fine.stream, [fine.event]);

    // Written right behind the poison: it waits for the isolation pass (bounded retries, then
    // parking) of the page it may share with it. About 0.3 s on a quiet machine; bounded well
    // below the old behaviour (never) even on a saturated one.
    const b = hire(tenantB, '2025-03-01T00:00:00Z');
    const { position } = await store.append(b.stream, [b.event]);
    const acknowledged = performance.now();
    expect(await waitForCheckpoint(db.pool, employeesProjection.name, position, 5_000)).toBe(true);
    expect(await listIds(db.pool, tenantB)).toEqual([b.employeeId]);
    const behindPoison = performance.now() - acknowledged;
    expect(behindPoison).toBeLessThan(3_000);

    // Tenant A's good employee is there too; the poison one is not, and is parked with its error.
    expect(await listIds(db.pool, tenantA)).toEqual([fine.employeeId]);
    const parked = await listParkedEvents(db.pool, employeesProjection.name);
    expect(parked.map((p) => [p.event.id, p.tenantId, p.status])).toEqual([
      [poison.event.id, tenantA, 'parked'],
      [expect.any(String), tenantA, 'parked'],
    ]);
    const [first, second] = parked;
    expect(first?.attempts).toBe(3);
    expect(first?.error).toMatch(/out of range|22008/);
    expect(first?.event.streamId).toBe(poison.stream);
    // The stream's later event waits behind it instead of being applied out of order.
    expect(second?.event.type).toBe('EmployeeStatusChanged');
    expect(second?.error).toContain(`waiting behind parked event ${poison.event.id}`);
    expect(parkedLog).toHaveLength(2);

    // With the poison event in the log, tenant B's next writes appear in its list within 1 s,
    // and so do tenant A's writes to other employees.
    const b2 = hire(tenantB, '2025-04-01T00:00:00Z');
    const a2 = hire(tenantA, '2024-02-01T00:00:00Z');
    const later = await store.append(b2.stream, [b2.event]);
    const written = performance.now();
    await store.append(a2.stream, [a2.event]);
    expect(await waitForCheckpoint(db.pool, employeesProjection.name, later.position, 1_000)).toBe(true);
    expect(await listIds(db.pool, tenantB)).toEqual([b2.employeeId, b.employeeId]);
    const afterPoison = performance.now() - written;
    expect(afterPoison).toBeLessThan(1_000);
    console.info(
      `[poison event] tenant B visible ${behindPoison.toFixed(0)} ms after a write right behind the poison, ${afterPoison.toFixed(0)} ms after a later one`,
    );
  });

  it('reports the parked events: gauge in /metrics, /health/ready degraded (200), ops status', async () => {
    const { db } = fixture;
    const registry = new Registry();
    registerParkedEventsMetric(registry, db.pool);
    const app = await createGateway({
      config: { BODY_LIMIT_BYTES: 1024, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
      readiness: [{ name: 'postgres', check: async () => undefined }, parkedEventsReadiness(db.pool)],
      registry,
      v1: [],
    });
    try {
      const ready = await app.inject({ url: '/health/ready' });
      expect(ready.statusCode).toBe(200);
      expect(ready.json()).toEqual({
        status: 'degraded',
        checks: { postgres: { status: 'up' }, projections: { status: 'degraded', detail: expect.stringContaining('employees=2') } },
      });
      const metrics = await app.inject({ url: '/metrics' });
      expect(metrics.body).toContain('eas_projection_parked_events{projection="employees"} 2');
    } finally {
      await app.close();
    }

    const { stdout } = await runOpsWith(opsEnv(db.url), 'projections', 'status', '--json');
    const status = z.object({ projections: z.array(z.object({ name: z.string(), parked: z.number() })) }).parse(JSON.parse(stdout));
    expect(status.projections.find((p) => p.name === employeesProjection.name)?.parked).toBe(2);
  }, 90_000);

  it('`ops projections retry` and `resolve` refuse while a rebuild builds: exit code 2, the reason on stderr, nothing changed', async () => {
    const { db } = fixture;
    const rebuild = new pg.Client({ connectionString: db.url });
    await rebuild.connect();
    try {
      await rebuild.query('select pg_advisory_lock(hashtext($1))', [replayLockKey(employeesProjection.name)]);
      for (const command of ['retry', 'resolve']) {
        const run = runOpsWith(opsEnv(db.url), 'projections', command, employeesProjection.name);
        await expect(run).resolves.toMatchObject({
          code: 2,
          stderr: expect.stringContaining(
            `a rebuild of projection ${employeesProjection.name} is running: retry once it has swapped in (projections status)\n`,
          ),
        });
      }
      expect((await listParkedEvents(db.pool, employeesProjection.name, { status: 'parked' })).length).toBe(2);
    } finally {
      await rebuild.end();
    }
  }, 90_000);
});

/**
 * A projection whose handler throws (a plain exception, no SQL error) on events marked
 * `poison` while `broken` is set: the "bug" an operator fixes before `projections retry`.
 */
function flakyProjection(state: { broken: boolean; transientFailures: number }) {
  return defineProjection({
    name: 'flaky',
    version: 1,
    eventTypes: ['Noted'],
    tables: {
      flaky_notes: (table) => [
        sql.fragment`create table ${table} (event_id text primary key, stream_id text not null, seq serial, tenant text)`,
      ],
    },
    async handle(tx, events, { flaky_notes }) {
      if (state.transientFailures > 0) {
        state.transientFailures--;
        throw Object.assign(new Error('could not serialize access due to concurrent update'), { code: '40001' });
      }
      for (const event of events) {
        const data = z.object({ poison: z.boolean().optional() }).parse(event.data);
        if (data.poison && state.broken) throw new Error(`cannot handle ${event.id}`);
        await tx.query(sql.type(z.object({}))`
          insert into ${flaky_notes} (event_id, stream_id, tenant) values (${event.id}, ${event.streamId}, ${String(event.metadata.tenantId)})
        `);
      }
    },
  });
}

describe('when a handler throws on one event', () => {
  const fixture = useTestEventStore();
  const state = { broken: true, transientFailures: 0 };
  const flaky = flakyProjection(state);
  let projector: ProjectorHandle;
  const noted = (tenant: string, poison = false): NewEvent => ({
    id: randomUUID(),
    type: 'Noted',
    data: { poison },
    metadata: { tenantId: tenant },
  });
  const notes = () => fixture.db.pool.anyFirst(sql.type(z.object({ event_id: z.string() }))`select event_id from flaky_notes order by seq`);

  beforeAll(async () => {
    projector = await startBuilt(
      () => runProjection(fixture.db.pool, fixture.store, flaky, { pollIntervalMs: 250 }),
      fixture.db.pool,
      flaky.name,
    );
  });
  afterAll(async () => {
    await projector?.stop();
  });

  const appendAll = async (store: EventStore, items: Array<[string, NewEvent]>) => {
    let last;
    for (const [stream, event] of items) last = await store.append(stream, [event]);
    return last;
  };

  it('keeps going: parks the event after bounded retries, applies the others; retry after the fix applies it exactly once, in order', async () => {
    const { db, store } = fixture;
    const bad = noted('a', true);
    const afterBad = noted('a');
    const others = [noted('b'), noted('b'), noted('a')];
    const last = await appendAll(store, [
      ['s-b1', others[0] as NewEvent],
      ['s-a1', bad],
      ['s-b2', others[1] as NewEvent],
      ['s-a1', afterBad], // same stream as the bad one: must wait behind it
      ['s-a2', others[2] as NewEvent],
    ]);
    expect(await waitForCheckpoint(db.pool, flaky.name, last?.position ?? { commit: 0n, prepare: 0n }, 5_000)).toBe(true);
    expect(await notes()).toEqual(others.map((e) => e.id));
    const parked = await listParkedEvents(db.pool, flaky.name);
    expect(parked.map((p) => [p.event.id, p.status, p.attempts])).toEqual([
      [bad.id, 'parked', 3],
      [afterBad.id, 'parked', 0],
    ]);
    expect(parked[0]?.error).toContain(`cannot handle ${bad.id}`);
    const checkpoint = await readCheckpoint(db.pool, flaky.name);
    expect(checkpoint?.eventsApplied).toBe(3);

    const live = { flaky_notes: sql.identifier(['flaky_notes']) };
    // Still broken: nothing applied, attempts + 1, both stay parked.
    expect(await retryParkedEvents(db.pool, flaky, live)).toEqual({ retried: 0, stillParked: 2 });
    expect((await listParkedEvents(db.pool, flaky.name)).map((p) => [p.status, p.attempts])).toEqual([
      ['parked', 4],
      ['parked', 1],
    ]);

    state.broken = false; // the fix
    expect(await retryParkedEvents(db.pool, flaky, live)).toEqual({ retried: 2, stillParked: 0 });
    expect(await notes()).toEqual([...others.map((e) => e.id), bad.id, afterBad.id]);
    expect(await listParkedEvents(db.pool, flaky.name, { status: 'parked' })).toEqual([]);
    expect((await listParkedEvents(db.pool, flaky.name, { status: 'retried' })).map((p) => p.event.id)).toEqual([bad.id, afterBad.id]);
    // A second retry finds nothing to do: never applied twice (flaky_notes' primary key would say so too).
    expect(await retryParkedEvents(db.pool, flaky, live)).toEqual({ retried: 0, stillParked: 0 });
    expect((await readCheckpoint(db.pool, flaky.name))?.eventsApplied).toBe(5);

    // The live projector did not re-apply them either, and applies new events of the same stream in order.
    const next = await store.append('s-a1', [noted('a')]);
    expect(await waitForCheckpoint(db.pool, flaky.name, next.position, 5_000)).toBe(true);
    expect(await notes()).toHaveLength(6);
  });

  it('refuses to retry or resolve while a rebuild of the projection is building (it would place what it applies wrongly), not while another retry runs', async () => {
    const { db } = fixture;
    const live = { flaky_notes: sql.identifier(['flaky_notes']) };
    const rebuild = new pg.Client({ connectionString: db.url });
    await rebuild.connect();
    try {
      await rebuild.query('select pg_advisory_lock(hashtext($1))', [replayLockKey(flaky.name)]);
      await expect(retryParkedEvents(db.pool, flaky, live)).rejects.toBeInstanceOf(RebuildInProgressError);
      await expect(resolveParkedEvents(db.pool, flaky.name)).rejects.toBeInstanceOf(RebuildInProgressError);
      await rebuild.query('select pg_advisory_unlock(hashtext($1))', [replayLockKey(flaky.name)]);
      // Another retry in progress (the lock held shared) does not stop this one.
      await rebuild.query('select pg_advisory_lock_shared(hashtext($1))', [replayLockKey(flaky.name)]);
      expect(await retryParkedEvents(db.pool, flaky, live)).toEqual({ retried: 0, stillParked: 0 });
      expect(await resolveParkedEvents(db.pool, flaky.name)).toBe(0);
    } finally {
      await rebuild.end();
    }
  });

  it('retries a page that fails transiently (serialization failure) without parking anything', async () => {
    const { db, store } = fixture;
    state.transientFailures = 3;
    const event = noted('c');
    const { position } = await store.append('s-c1', [event]);
    expect(await waitForCheckpoint(db.pool, flaky.name, position, 10_000)).toBe(true);
    expect(state.transientFailures).toBe(0);
    expect(await notes()).toContain(event.id);
    expect(await listParkedEvents(db.pool, flaky.name, { status: 'parked' })).toEqual([]);
  });
});
