import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabasePool, type DatabasePool } from '../../../../shared/db/pool.ts';
import { applyMigrations as migrate } from '../../../../shared/db/migrate.ts';
import { WrongExpectedRevisionError } from '../../../../shared/errors.ts';
import { createPostgresEventStore } from '../../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../../shared/event-store/port.ts';
import { createEmptyTestDatabase, sqlAt, waitsForLock, type BareTestDatabase } from '../../../support/database.ts';
import { databaseBefore010, eventStoreMigrations, indexOfMigration, oldFlush } from '../../../support/eventStoreMigrations.ts';
import { waitFor } from '../../../support/waitFor.ts';

/**
 * Migrations 010 to 014 on a log written before them: es_streams held every stream's
 * revision until then; afterwards the appends read it from the log, and the table is gone. A
 * deployment that upgrades must go on deciding every append exactly as before, on streams written
 * by the old functions (group commit's flush and the older single `es_append`), and appends that
 * gateways not yet upgraded make while it migrates must not fail. 013 and 014 make the readers'
 * order (transaction_id, position) unique and drop the index on position alone: every event must
 * stay where it was, and new ones come after.
 */
let database: BareTestDatabase;
let url: string;
let pool: DatabasePool;
let store: EventStore;
const run = randomUUID().slice(0, 8);
const ids = { a0: randomUUID(), a1: randomUUID(), a2: randomUUID(), b0: randomUUID(), c0: randomUUID() };
const sqlOn = <T extends pg.QueryResultRow>(text: string, values: unknown[] = []) => sqlAt<T>(url, text, values);
type EventPosition = { event_id: string; commit: string; prepare: string };
const positionsQuery =
  'select event_id, transaction_id::text as commit, position::text as prepare from es_events order by transaction_id, position';
let positionsBefore: EventPosition[];

beforeAll(async () => {
  database = await databaseBefore010();
  url = database.url;
  // Written by the functions as they were before 010 (the flush's, then es_append's).
  expect(await oldFlush(url, [{ stream: `${run}-a`, expected: 'no_stream', ids: [ids.a0, ids.a1], type: 'A' }])).toEqual(['appended']);
  expect(
    await oldFlush(url, [
      { req: 0, stream: `${run}-a`, expected: '1', ids: [ids.a2], type: 'A' },
      { req: 0, stream: `${run}-b`, expected: 'no_stream', ids: [ids.b0], type: 'B' },
    ]),
  ).toEqual(['appended', 'appended']);
  await sqlOn(`select * from es_append($1, 'no_stream', array[$2]::uuid[], array['C'], array['{}']::jsonb[], array['{}']::jsonb[])`, [
    `${run}-c`,
    ids.c0,
  ]);
  expect(await sqlOn('select stream_id, revision::int from es_streams order by stream_id')).toEqual([
    { stream_id: `${run}-a`, revision: 2 },
    { stream_id: `${run}-b`, revision: 0 },
    { stream_id: `${run}-c`, revision: 0 },
  ]);
  positionsBefore = await sqlOn<EventPosition>(positionsQuery);
  await migrate(url, eventStoreMigrations);
  pool = await createDatabasePool(url, { maximumPoolSize: 4 });
  store = createPostgresEventStore(pool);
});

afterAll(async () => {
  await store?.close();
  await pool?.end();
  await database?.drop();
});

describe('a log written before migration 010, after it', () => {
  it('has no es_streams table, and no function names it', async () => {
    expect(await sqlOn(`select to_regclass('es_streams') as t`)).toEqual([{ t: null }]);
    const naming = await sqlOn<{ proname: string }>(
      `select proname from pg_proc where prosrc like '%es_streams%' and proname like 'es\\_%'`,
    );
    expect(naming).toEqual([]);
  });

  it('decides expected revisions on the old streams as before', async () => {
    await expect(store.append(`${run}-a`, [{ id: randomUUID(), type: 'A', data: {} }], { expectedRevision: 1 })).rejects.toBeInstanceOf(
      WrongExpectedRevisionError,
    );
    await expect(
      store.append(`${run}-b`, [{ id: randomUUID(), type: 'B', data: {} }], { expectedRevision: 'no_stream' }),
    ).rejects.toMatchObject({ actual: 0 });
    const [a, b, d] = await store.appendMany([
      { streamId: `${run}-a`, events: [{ id: randomUUID(), type: 'A', data: {} }], expectedRevision: 2 },
      { streamId: `${run}-b`, events: [{ id: randomUUID(), type: 'B', data: {} }], expectedRevision: 'stream_exists' },
      { streamId: `${run}-d`, events: [{ id: randomUUID(), type: 'D', data: {} }], expectedRevision: 'no_stream' },
    ]);
    expect([a?.nextRevision, b?.nextRevision, d?.nextRevision]).toEqual([3, 1, 0]);
    expect((await store.readStream(`${run}-a`)).map((e) => e.revision)).toEqual([0, 1, 2, 3]);
  });

  it('answers a retry of an old append as a duplicate, with its first position', async () => {
    const [original] = (await store.readStream(`${run}-b`)).filter((e) => e.id === ids.b0);
    const retried = await store.append(`${run}-b`, [{ id: ids.b0, type: 'B', data: {} }], { expectedRevision: 'no_stream' });
    expect(retried).toEqual({ nextRevision: 0, position: original?.position });
  });

  it('keeps the older es_append working for a gateway not yet upgraded', async () => {
    const conflict = await sqlOn<{ outcome: string; next_revision: string | null }>(
      `select outcome, next_revision from es_append($1, '5', array[$2]::uuid[], array['C'], array['{}']::jsonb[], array['{}']::jsonb[])`,
      [`${run}-c`, randomUUID()],
    );
    expect(conflict).toEqual([{ outcome: 'wrong_expected_revision', next_revision: '0' }]);
    const appended = await sqlOn<{ outcome: string; next_revision: string }>(
      `select outcome, next_revision from es_append($1, '0', array[$2]::uuid[], array['C'], array['{}']::jsonb[], array['{}']::jsonb[])`,
      [`${run}-c`, randomUUID()],
    );
    expect(appended).toEqual([{ outcome: 'appended', next_revision: '1' }]);
    expect((await store.readStream(`${run}-c`)).map((e) => e.revision)).toEqual([0, 1]);
  });
});

describe('a log written before migrations 013 and 014, after them', () => {
  it("keeps no index on position alone; the readers' order is unique; (stream_id, revision) is the replica identity", async () => {
    const indexes = await sqlOn<{ name: string; definition: string; replica: boolean; valid: boolean }>(
      `select c.relname as name, pg_get_indexdef(i.indexrelid) as definition, i.indisreplident as replica, i.indisvalid as valid
       from pg_index i join pg_class c on c.oid = i.indexrelid where i.indrelid = 'es_events'::regclass order by 1`,
    );
    expect(indexes).toEqual([
      {
        name: 'es_events_event_id_key',
        definition: expect.stringContaining('UNIQUE INDEX es_events_event_id_key ON public.es_events USING btree (event_id)'),
        replica: false,
        valid: true,
      },
      {
        name: 'es_events_global_order',
        definition: expect.stringContaining(
          'UNIQUE INDEX es_events_global_order ON public.es_events USING btree (transaction_id, "position") INCLUDE (type)',
        ),
        replica: false,
        valid: true,
      },
      {
        name: 'es_events_stream_id_revision_key',
        definition: expect.stringContaining(
          'UNIQUE INDEX es_events_stream_id_revision_key ON public.es_events USING btree (stream_id, revision)',
        ),
        replica: true,
        valid: true,
      },
    ]);
    expect(await sqlOn(`select relreplident from pg_class where oid = 'es_events'::regclass`)).toEqual([{ relreplident: 'i' }]);
  });

  it('keeps every event at its position, and puts new events after them', async () => {
    expect((await sqlOn<EventPosition>(positionsQuery)).slice(0, positionsBefore.length)).toEqual(positionsBefore);
    const last = positionsBefore.at(-1);
    if (!last) throw new Error('no events written before the migration');
    const [e, f] = (
      await store.appendMany([
        {
          streamId: `${run}-e`,
          events: [
            { id: randomUUID(), type: 'E', data: {} },
            { id: randomUUID(), type: 'E', data: {} },
          ],
          expectedRevision: 'no_stream',
        },
        { streamId: `${run}-f`, events: [{ id: randomUUID(), type: 'F', data: {} }], expectedRevision: 'no_stream' },
      ])
    ).map((r) => r.position);
    expect(f?.commit).toBe(e?.commit);
    expect((e?.prepare ?? 0n) < (f?.prepare ?? 0n)).toBe(true);
    expect((e?.commit ?? 0n) > BigInt(last.commit)).toBe(true);
  });

  it('refuses an event whose (transaction, position) another event has, even one that sets its own position', async () => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query('begin');
      const insert = `insert into es_events (position, stream_id, revision, event_id, type, data) overriding system value values (42, $1, $2, $3, 'X', '{}')`;
      await client.query(insert, [`${run}-x`, 0, randomUUID()]);
      await expect(client.query(insert, [`${run}-x`, 1, randomUUID()])).rejects.toMatchObject({
        code: '23505',
        constraint: 'es_events_global_order',
      });
    } finally {
      await client.query('rollback').catch(() => undefined);
      await client.end();
    }
  });
});

describe('migration 014 behind a transaction that holds es_events', () => {
  it('gives up after its lock timeout, changes nothing, and succeeds on the next start', async () => {
    const db = await createEmptyTestDatabase();
    const holder = new pg.Client({ connectionString: db.url });
    try {
      await migrate(db.url, eventStoreMigrations.slice(0, indexOfMigration('event-store/014')));
      const through014 = eventStoreMigrations.slice(0, indexOfMigration('event-store/015'));
      await holder.connect();
      await holder.query('begin');
      await holder.query('select count(*) from es_events');
      const started = Date.now();
      await expect(migrate(db.url, through014)).rejects.toThrow(
        /event-store\/014-no-position-index failed \(.*014-no-position-index\.sql\): canceling statement due to lock timeout/,
      );
      expect(Date.now() - started).toBeGreaterThanOrEqual(9_000);
      const indexes = async () =>
        (
          await sqlAt<{ name: string }>(
            db.url,
            `select indexrelid::regclass::text as name from pg_index where indrelid = 'es_events'::regclass order by 1`,
          )
        ).map((r) => r.name);
      expect(await indexes()).toEqual([
        'es_events_event_id_key',
        'es_events_global_order',
        'es_events_global_order_key',
        'es_events_pkey',
        'es_events_stream_id_revision_key',
      ]);
      await holder.query('commit');
      expect(await migrate(db.url, through014)).toEqual(['event-store/014-no-position-index']);
      expect(await indexes()).toEqual(['es_events_event_id_key', 'es_events_global_order', 'es_events_stream_id_revision_key']);
    } finally {
      await holder.end().catch(() => undefined);
      await db.drop();
    }
  }, 30_000);
});

describe('migrating while a flush of the old functions is in flight', () => {
  it('keeps appending on the new functions while the drop of es_streams waits for that flush', async () => {
    const db = await databaseBefore010();
    const livePool = await createDatabasePool(db.url, { maximumPoolSize: 4 });
    let live: EventStore | undefined;
    const inFlight = new pg.Client({ connectionString: db.url });
    await inFlight.connect();
    try {
      const stream = `inflight-${randomUUID()}`;
      // A flush of the old es_append_batch whose transaction has not committed yet: it holds
      // es_streams until it does.
      await inFlight.query('begin');
      await inFlight.query(
        `select * from es_append_batch(array[0], array[$1], array['no_stream'], array[1], array[$2]::uuid[], array['Old'], array['{}']::jsonb[], array['{}']::jsonb[])`,
        [stream, randomUUID()],
      );
      const migrating = migrate(db.url, eventStoreMigrations);
      // 010 commits; 011's drop waits for the flush in flight.
      await waitFor(() => waitsForLock(db.url, '%drop table es_streams%'));
      // Meanwhile the gateways not yet upgraded go on appending, on the new bodies of the functions
      // they call, which do not wait for the drop.
      const during = await Promise.all([
        oldFlush(db.url, [{ stream: `during-${randomUUID()}`, expected: 'no_stream', ids: [randomUUID()], type: 'New' }]),
        oldFlush(db.url, [
          { req: 0, stream: `during-${randomUUID()}`, expected: 'no_stream', ids: [randomUUID()], type: 'New' },
          { req: 0, stream: `during-${randomUUID()}`, expected: 'no_stream', ids: [randomUUID()], type: 'New' },
        ]),
      ]);
      expect(during.flat()).toEqual(['appended', 'appended', 'appended']);
      await inFlight.query('commit');
      expect(await migrating).toContain('event-store/011-drop-streams-table');
      live = createPostgresEventStore(livePool);
      expect((await live.append(stream, [{ id: randomUUID(), type: 'After', data: {} }], { expectedRevision: 0 })).nextRevision).toBe(1);
      expect((await live.readStream(stream)).map((e) => e.type)).toEqual(['Old', 'After']);
    } finally {
      await inFlight.end();
      await live?.close();
      await livePool.end();
      await db.drop();
    }
  });
});

describe('migrating a log whose es_streams disagrees with its events', () => {
  it('refuses, and leaves the schema as it was', async () => {
    const db = await databaseBefore010();
    try {
      const stream = `edited-${randomUUID()}`;
      expect(await oldFlush(db.url, [{ stream, expected: 'no_stream', ids: [randomUUID()], type: 'A' }])).toEqual(['appended']);
      // A row written outside the event store (a manual fix gone wrong).
      await sqlAt(db.url, 'update es_streams set revision = 5 where stream_id = $1', [stream]);
      await expect(migrate(db.url, eventStoreMigrations)).rejects.toThrow(/es_streams disagrees with es_events on 1 stream/);
      expect(await sqlAt(db.url, `select to_regclass('es_streams')::text as t`)).toEqual([{ t: 'es_streams' }]);
      expect(await sqlAt(db.url, `select id from schema_migrations where id like 'event-store/01%'`)).toEqual([]);
    } finally {
      await db.drop();
    }
  });
});
