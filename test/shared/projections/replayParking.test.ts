import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql, type DatabasePool } from '../../../shared/db/pool.ts';
import { START, type EventStore, type GlobalPosition, type NewEvent } from '../../../shared/event-store/port.ts';
import { employeesProjection } from '../../../projections/employees/employeesProjection.ts';
import { listEmployees } from '../../../projections/employees/queries.ts';
import { defineProjection, type Projection } from '../../../shared/projections/projection.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import { runProjection } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { RebuildRaceError, listParkedEvents, parkEvent, parkedStreams, retryParkedEvents } from '../../../shared/projections/parking.ts';
import { useTestEventStore } from '../../support/database.ts';
import { hire, statusChanged } from '../../support/projections/employeeEvents.ts';

/**
 * Poison events in rebuilds: a poison event already in the log must not stop a replay (page by page or
 * bulk), which a version bump forces at start-up; it is parked once, with the NEW version.
 */

const listIds = async (pool: DatabasePool, tenantId: string) =>
  (await listEmployees(pool, tenantId, { page: 1, limit: 100 })).data.map((e) => e.id).sort();

/** A log with a poison hire (year 0) for tenant A, a later event of its stream, and good hires for A and B. */
async function givenALogWithAPoisonEvent(store: EventStore) {
  const tenantA = randomUUID();
  const tenantB = randomUUID();
  const goodA = [hire(tenantA, '2024-01-01T00:00:00Z'), hire(tenantA, '2024-02-01T00:00:00Z')];
  const goodB = [hire(tenantB, '2025-03-01T00:00:00Z'), hire(tenantB, '2025-04-01T00:00:00Z')];
  const poison = hire(tenantA, '0000-06-01T00:00:00Z');
  const behind = statusChanged(tenantA, poison.employeeId, 'on_leave');
  for (const h of [goodA[0], goodB[0], poison, goodA[1], goodB[1]]) if (h) await store.append(h.stream, [h.event]);
  const last = (await store.append(poison.stream, [behind])).position;
  return { tenantA, tenantB, goodA, goodB, poison, behind, last };
}

/** Runs a projector until its checkpoint reaches `position` at `projection`'s version, then stops it. */
async function projectUntil(pool: DatabasePool, store: EventStore, projection: Projection<string>, position: GlobalPosition) {
  const errors: unknown[] = [];
  const parked: string[] = [];
  const projector = runProjection(pool, store, projection, {
    pollIntervalMs: 100,
    onError: (error) => errors.push(error),
    onParked: (event) => parked.push(event.id),
  });
  try {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const reached = await waitForCheckpoint(pool, projection.name, position, 1_000);
      const checkpoint = await readCheckpoint(pool, projection.name);
      if (reached && checkpoint?.version === projection.version) break;
      if (Date.now() > deadline) throw new Error(`not built: ${errors.map(String).join('; ')}`);
    }
  } finally {
    await projector.stop();
  }
  return { errors, parked };
}

const parkedRows = (pool: DatabasePool, name: string) =>
  pool.any(sql.type(z.object({ event_id: z.string(), version: z.number(), status: z.string(), error: z.string() }))`
    select event_id, version, status, error from projection_parked_events where projection = ${name} order by version, commit_position, prepare_position
  `);

describe('when a version bump rebuilds the employees model (bulk path) with a poison event in the log', () => {
  const fixture = useTestEventStore();

  it('finishes the rebuild, applies every other event (both tenants), parks the poison event and the one behind it once, under the new version', async () => {
    const { db, store } = fixture;
    const log = await givenALogWithAPoisonEvent(store);
    // Version N is built and live (it parks the poison event as it follows the log).
    await projectUntil(db.pool, store, employeesProjection, log.last);
    expect((await listParkedEvents(db.pool, employeesProjection.name)).map((p) => p.event.id)).toEqual([
      log.poison.event.id,
      log.behind.id,
    ]);

    // The deploy bumps the version: the projector rebuilds at start-up (bulk fold + load).
    const bumped = { ...employeesProjection, version: employeesProjection.version + 1 };
    const { parked } = await projectUntil(db.pool, store, bumped, log.last);
    expect((await readCheckpoint(db.pool, bumped.name))?.version).toBe(bumped.version);
    expect(await listIds(db.pool, log.tenantA)).toEqual(log.goodA.map((h) => h.employeeId).sort());
    expect(await listIds(db.pool, log.tenantB)).toEqual(log.goodB.map((h) => h.employeeId).sort());
    expect(parked).toEqual([log.poison.event.id, log.behind.id]);
    const rows = (await parkedRows(db.pool, bumped.name)).filter((r) => r.version === bumped.version);
    expect(rows.map((r) => [r.event_id, r.status])).toEqual([
      [log.poison.event.id, 'parked'],
      [log.behind.id, 'parked'],
    ]);
    expect(rows[0]?.error).toMatch(/out of range|22008/);
    // Ops status counts the live version's parked events.
    expect((await listParkedEvents(db.pool, bumped.name)).map((p) => p.version)).toEqual([bumped.version, bumped.version]);
    expect((await readCheckpoint(db.pool, bumped.name))?.eventsApplied).toBe(4);

    // Live after the rebuild: new writes of both tenants appear.
    const b3 = hire(log.tenantB, '2025-05-01T00:00:00Z');
    const { position } = await store.append(b3.stream, [b3.event]);
    await projectUntil(db.pool, store, bumped, position);
    expect(await listIds(db.pool, log.tenantB)).toContain(b3.employeeId);
  }, 60_000);
});

describe('when an operator replays the employees model (bulk path) with a poison event in the log', () => {
  const fixture = useTestEventStore();

  it('`npm run ops -- projections replay employees` (bulk path) finishes too, and does not park the same event twice', async () => {
    const { db, store } = fixture;
    const log = await givenALogWithAPoisonEvent(store);
    await projectUntil(db.pool, store, employeesProjection, log.last);
    const before = await listParkedEvents(db.pool, employeesProjection.name, { status: 'parked' });

    const ops = (...args: string[]) =>
      promisify(execFile)(process.execPath, [resolve(import.meta.dirname, '../../../scripts/ops.ts'), 'projections', ...args], {
        env: { ...process.env, DATABASE_URL: db.url, REDIS_URL: '', KAFKA_BROKERS: '', EVENTSTORE_URL: '', LOG_LEVEL: 'silent' },
        timeout: 60_000,
      });
    const { stdout } = await ops('replay', employeesProjection.name);
    expect(stdout).toMatch(/replayed employees: .*; 2 parked/);
    expect(await listIds(db.pool, log.tenantA)).toEqual(log.goodA.map((h) => h.employeeId).sort());
    expect(await listIds(db.pool, log.tenantB)).toEqual(log.goodB.map((h) => h.employeeId).sort());
    const after = await listParkedEvents(db.pool, employeesProjection.name, { status: 'parked' });
    // Same rows (one per event), tried again by the replay.
    expect(after.map((p) => p.event.id)).toEqual(before.map((p) => p.event.id));
    expect(after.map((p) => p.event.id)).toContain(log.poison.event.id);
    expect(new Set(after.map((p) => p.event.id)).size).toBe(after.length);
    const poisonRow = after.find((p) => p.event.id === log.poison.event.id);
    expect(poisonRow?.attempts).toBeGreaterThan(before.find((p) => p.event.id === log.poison.event.id)?.attempts ?? 0);

    const status = z
      .object({ projections: z.array(z.object({ name: z.string(), parked: z.number() })) })
      .parse(JSON.parse((await ops('status', '--json')).stdout));
    expect(status.projections.find((p) => p.name === employeesProjection.name)?.parked).toBe(after.length);
  }, 120_000);
});

/** Page-by-page replay (no bulk hook); its handler throws on `poison` events while `broken`. */
function notesProjection(state: { broken: boolean }, version: number) {
  return defineProjection({
    name: 'replay_notes',
    version,
    eventTypes: ['Noted'],
    tables: {
      replay_notes: (table) => [sql.fragment`create table ${table} (event_id text primary key, seq serial)`],
    },
    async handle(tx, events, { replay_notes }) {
      for (const event of events) {
        if (z.object({ poison: z.boolean() }).parse(event.data).poison && state.broken) throw new Error(`cannot handle ${event.id}`);
        await tx.query(sql.type(z.object({}))`insert into ${replay_notes} (event_id) values (${event.id})`);
      }
    },
  });
}

describe('when a version bump rebuilds a projection page by page with a poison event in the log', () => {
  const fixture = useTestEventStore();

  it('finishes, parks the poison event under the new version, and `retry` applies it after the fix', async () => {
    const { db, store } = fixture;
    const state = { broken: true };
    const noted = (poison = false): NewEvent => ({ id: randomUUID(), type: 'Noted', data: { poison }, metadata: { tenantId: 't' } });
    const events = [noted(), noted(true), noted(), noted()];
    let last: GlobalPosition = START;
    for (const [i, event] of events.entries()) last = (await store.append(`n-${i}`, [event])).position;
    const v1 = notesProjection(state, 1);
    await projectUntil(db.pool, store, v1, last);
    const v2 = notesProjection(state, 2);
    await projectUntil(db.pool, store, v2, last);
    const notes = () => db.pool.anyFirst(sql.type(z.object({ event_id: z.string() }))`select event_id from replay_notes order by seq`);
    expect(await notes()).toEqual([events[0], events[2], events[3]].map((e) => e?.id));
    const parked = await listParkedEvents(db.pool, v2.name);
    // Parked in the live model (version 1), so the rebuild tried it last, in its swap, once (the
    // live projector waits for the swap), and parked it again under version 2; version 1's row is left.
    expect(parked.map((p) => [p.event.id, p.version, p.status, p.attempts])).toEqual([[events[1]?.id, 2, 'parked', 1]]);

    state.broken = false;
    expect(await retryParkedEvents(db.pool, v2, { replay_notes: sql.identifier(['replay_notes']) })).toEqual({
      retried: 1,
      stillParked: 0,
    });
    expect(await notes()).toContain(events[1]?.id);
    expect((await readCheckpoint(db.pool, v2.name))?.eventsApplied).toBe(4);
  }, 60_000);
});

describe('when the live projector parks an event a rebuild has already applied in place (the live projector far behind)', () => {
  const fixture = useTestEventStore();

  it('the swap refuses (nothing swapped), and the next build applies that event last, as a retry would', async () => {
    const { db, store } = fixture;
    const noted = (): NewEvent => ({ id: randomUUID(), type: 'Noted', data: { poison: false }, metadata: { tenantId: 't' } });
    const events = [noted(), noted(), noted(), noted()];
    let last: GlobalPosition = START;
    for (const [i, event] of events.entries()) last = (await store.append(`race-${i}`, [event])).position;
    await projectUntil(db.pool, store, notesProjection({ broken: false }, 1), last);
    const notes = () => db.pool.anyFirst(sql.type(z.object({ event_id: z.string() }))`select event_id from replay_notes order by seq`);
    const raced = events[1];
    if (!raced) throw new Error('no event');

    // Version 2's build applies `raced`; in the same moment the live projector (version 1) parks
    // it: simulated by the handler, in the build's own page transaction.
    const v2 = notesProjection({ broken: false }, 2);
    let parkedLive = false;
    const racing = defineProjection({
      ...v2,
      async handle(tx, batch, tables) {
        const hit = batch.find((e) => e.id === raced.id);
        if (hit && !parkedLive) {
          parkedLive = true;
          await parkEvent(tx, { name: v2.name, version: 1 }, hit, { error: 'simulated: parked live', attempts: 3 });
        }
        await v2.handle(tx, batch, tables);
      },
    });
    await expect(replayProjection(db.pool, store, racing)).rejects.toBeInstanceOf(RebuildRaceError);
    expect((await readCheckpoint(db.pool, v2.name))?.version).toBe(1);
    expect(await notes()).toEqual(events.map((e) => e.id));

    const rebuilt = await replayProjection(db.pool, store, racing);
    expect(rebuilt.parked).toBe(0);
    expect((await readCheckpoint(db.pool, v2.name))?.version).toBe(2);
    expect(await notes()).toEqual([events[0], events[2], events[3], raced].map((e) => e?.id));
    expect(
      await db.pool.anyFirst(sql.type(z.object({ status: z.string() }))`
      select status from projection_parked_events where projection = ${v2.name} and version = 1 and event_id = ${raced.id}
    `),
    ).toEqual(['retried']);
  });
});

describe('when the live version parked events of a type the new version no longer reads', () => {
  const fixture = useTestEventStore();

  it('the new version builds and swaps (the build never meets them, so it cannot have applied them in place)', async () => {
    const { db, store } = fixture;
    const state = { broken: true };
    const v1 = defineProjection({ ...notesProjection(state, 1), eventTypes: ['Noted', 'Other'] });
    const other: NewEvent = { id: randomUUID(), type: 'Other', data: { poison: true }, metadata: { tenantId: 't' } };
    const note: NewEvent = { id: randomUUID(), type: 'Noted', data: { poison: false }, metadata: { tenantId: 't' } };
    await store.append('types-1', [other]);
    const last = (await store.append('types-2', [note])).position;
    await projectUntil(db.pool, store, v1, last);
    expect((await listParkedEvents(db.pool, v1.name)).map((p) => p.event.id)).toEqual([other.id]);

    const v2 = notesProjection(state, 2);
    expect((await replayProjection(db.pool, store, v2)).processed).toBe(1);
    expect((await readCheckpoint(db.pool, v2.name))?.version).toBe(2);
  });
});

describe('which parked events block a page of the live projector', () => {
  const fixture = useTestEventStore();

  it('only those before the page: a row a same-version replay parked ahead of the live projector blocks nothing yet', async () => {
    const { db, store } = fixture;
    const projection = notesProjection({ broken: false }, 1);
    const [earlier, parked] = [
      await store.append('blocking', [{ id: randomUUID(), type: 'Noted', data: { poison: false }, metadata: {} }]),
      await store.append('blocking', [{ id: randomUUID(), type: 'Noted', data: { poison: true }, metadata: {} }]),
    ];
    const [, event] = await store.readStream('blocking');
    if (!event) throw new Error('no event');
    await db.pool.transaction((tx) => parkEvent(tx, projection, event, { error: 'parked by a replay', attempts: 3 }));
    expect(await parkedStreams(db.pool, projection, ['blocking'], earlier.position)).toEqual(new Map());
    const after = { commit: parked.position.commit, prepare: parked.position.prepare + 1n };
    expect(await parkedStreams(db.pool, projection, ['blocking'], after)).toEqual(new Map([['blocking', event.id]]));
  });
});
