import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabasePool, type DatabasePool } from '../../../shared/db/pool.ts';
import { migrate } from '../../../shared/db/migrate.ts';
import { WrongExpectedRevisionError } from '../../../shared/errors.ts';
import { createPostgresEventStore, eventStoreMigrations } from '../../../shared/event-store/postgres.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { createEmptyTestDatabase, sqlAt, waitsForLock, type BareTestDatabase } from '../../support/database.ts';
import { seededRandom } from '../../support/random.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * Migrations 010 to 014 on a log written before them (issue 11): es_streams held every stream's
 * revision until then; afterwards the appends read it from the log, and the table is gone. A
 * deployment that upgrades must go on deciding every append exactly as before, on streams written
 * by the old functions (group commit's flush and the older single `es_append`), and appends that
 * gateways not yet upgraded make while it migrates must not fail. 013 and 014 make the readers'
 * order (transaction_id, position) unique and drop the index on position alone: every event must
 * stay where it was, and new ones come after.
 */
/** Where the event-store migration whose id starts with `prefix` stands in their list. */
function indexOfMigration(prefix: string): number {
  const at = eventStoreMigrations.findIndex((m) => m.id.startsWith(prefix));
  if (at < 0) throw new Error(`no ${prefix} migration`);
  return at;
}
const before010 = eventStoreMigrations.slice(0, indexOfMigration('event-store/010'));

/** A new database migrated up to 009. */
async function databaseBefore010(): Promise<BareTestDatabase> {
  const database = await createEmptyTestDatabase();
  await migrate(database.url, before010);
  return database;
}

/** One part of a flush as these tests send it: a stream's events (one type), their expectation. */
type FlushPart = {
  readonly req?: number;
  readonly stream: string;
  readonly expected: string | null;
  readonly ids: readonly string[];
  readonly type: string;
  readonly metadata?: readonly (string | null)[];
};

/** `es_append_batch`'s first eight arguments for `parts` (request = the part's place unless given). */
const flushArguments = (parts: readonly FlushPart[]): unknown[] => [
  parts.map((p, i) => p.req ?? i),
  parts.map((p) => p.stream),
  parts.map((p) => p.expected),
  parts.map((p) => p.ids.length),
  parts.flatMap((p) => p.ids),
  parts.flatMap((p) => p.ids.map(() => p.type)),
  parts.flatMap((p) => p.ids.map((_, k) => JSON.stringify({ k }))),
  parts.flatMap((p) => p.metadata ?? p.ids.map(() => '{}')),
];

/**
 * A flush as a gateway from before 012 sends it (the 8-argument `es_append_batch`), for writes
 * made before the upgrade or by gateways not yet upgraded. Returns each part's outcome.
 */
async function oldFlush(databaseUrl: string, parts: readonly FlushPart[]): Promise<string[]> {
  const rows = await sqlAt<{ outcomes: string[] }>(
    databaseUrl,
    'select outcomes from es_append_batch($1::int4[], $2::text[], $3::text[], $4::int4[], $5::uuid[], $6::text[], $7::jsonb[], $8::jsonb[])',
    flushArguments(parts),
  );
  return rows[0]?.outcomes ?? [];
}

let database: BareTestDatabase;
let url: string;
let pool: DatabasePool;
let store: EventStore;
const run = randomUUID().slice(0, 8);
const ids = { a0: randomUUID(), a1: randomUUID(), a2: randomUUID(), b0: randomUUID(), c0: randomUUID() };
const sqlOn = <T extends pg.QueryResultRow>(text: string, values: unknown[] = []) => sqlAt<T>(url, text, values);
type EventPosition = { event_id: string; commit: string; prepare: string };
const positionsQuery = 'select event_id, transaction_id::text as commit, position::text as prepare from es_events order by transaction_id, position';
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
  await sqlOn(`select * from es_append($1, 'no_stream', array[$2]::uuid[], array['C'], array['{}']::jsonb[], array['{}']::jsonb[])`, [`${run}-c`, ids.c0]);
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
    const naming = await sqlOn<{ proname: string }>(`select proname from pg_proc where prosrc like '%es_streams%' and proname like 'es\\_%'`);
    expect(naming).toEqual([]);
  });

  it('decides expected revisions on the old streams as before', async () => {
    await expect(store.append(`${run}-a`, [{ id: randomUUID(), type: 'A', data: {} }], { expectedRevision: 1 })).rejects.toBeInstanceOf(WrongExpectedRevisionError);
    await expect(store.append(`${run}-b`, [{ id: randomUUID(), type: 'B', data: {} }], { expectedRevision: 'no_stream' })).rejects.toMatchObject({ actual: 0 });
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
  it('keeps no index on position alone; the readers\' order is unique; (stream_id, revision) is the replica identity', async () => {
    const indexes = await sqlOn<{ name: string; definition: string; replica: boolean; valid: boolean }>(
      `select c.relname as name, pg_get_indexdef(i.indexrelid) as definition, i.indisreplident as replica, i.indisvalid as valid
       from pg_index i join pg_class c on c.oid = i.indexrelid where i.indrelid = 'es_events'::regclass order by 1`,
    );
    expect(indexes).toEqual([
      { name: 'es_events_event_id_key', definition: expect.stringContaining('UNIQUE INDEX es_events_event_id_key ON public.es_events USING btree (event_id)'), replica: false, valid: true },
      {
        name: 'es_events_global_order',
        definition: expect.stringContaining('UNIQUE INDEX es_events_global_order ON public.es_events USING btree (transaction_id, "position") INCLUDE (type)'),
        replica: false,
        valid: true,
      },
      {
        name: 'es_events_stream_id_revision_key',
        definition: expect.stringContaining('UNIQUE INDEX es_events_stream_id_revision_key ON public.es_events USING btree (stream_id, revision)'),
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
        { streamId: `${run}-e`, events: [{ id: randomUUID(), type: 'E', data: {} }, { id: randomUUID(), type: 'E', data: {} }], expectedRevision: 'no_stream' },
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
      await expect(client.query(insert, [`${run}-x`, 1, randomUUID()])).rejects.toMatchObject({ code: '23505', constraint: 'es_events_global_order' });
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
      await expect(migrate(db.url, through014)).rejects.toThrow(/event-store\/014-no-position-index failed: canceling statement due to lock timeout/);
      expect(Date.now() - started).toBeGreaterThanOrEqual(9_000);
      const indexes = async () =>
        (await sqlAt<{ name: string }>(db.url, `select indexrelid::regclass::text as name from pg_index where indrelid = 'es_events'::regclass order by 1`)).map((r) => r.name);
      expect(await indexes()).toEqual(['es_events_event_id_key', 'es_events_global_order', 'es_events_global_order_key', 'es_events_pkey', 'es_events_stream_id_revision_key']);
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

type BatchAnswer = { error: string } | { outcomes: string[]; revisions: (string | null)[]; commits: (string | null)[]; prepares: (string | null)[] };

/** One flush through the 9-argument `es_append_batch`, as the adapter sends it (no wake-up). */
async function flushOn(client: pg.Client, parts: readonly FlushPart[]): Promise<BatchAnswer> {
  try {
    const { rows } = await client.query<{ outcomes: string[]; revisions: (string | null)[]; commits: (string | null)[]; prepares: (string | null)[] }>(
      'select outcomes, revisions, commits, prepares from es_append_batch($1::int4[], $2::text[], $3::text[], $4::int4[], $5::uuid[], $6::text[], $7::jsonb[], $8::jsonb[], $9::text)',
      [...flushArguments(parts), null],
    );
    const row = rows[0];
    if (!row) throw new Error('es_append_batch returned no row');
    return row;
  } catch (error) {
    if (error instanceof pg.DatabaseError) return { error: error.code ?? 'unknown' };
    throw error;
  }
}

describe('es_append_batch as 015 replaced it', () => {
  it('decides every batch as the version before it did: the same outcomes, revisions, positions and log', async () => {
    const before = await createEmptyTestDatabase();
    const after = await createEmptyTestDatabase();
    const clients = [new pg.Client({ connectionString: before.url }), new pg.Client({ connectionString: after.url })] as const;
    try {
      await migrate(before.url, eventStoreMigrations.slice(0, indexOfMigration('event-store/015')));
      // No variable of the new function's blocks hides another (PL/pgSQL refuses such a function
      // where an operator asks it to).
      await sqlAt(after.url, `alter database ${after.name} set plpgsql.extra_errors to 'shadowed_variables'`);
      await migrate(after.url, eventStoreMigrations);
      await Promise.all(clients.map((c) => c.connect()));
      const random = seededRandom(11);
      const pick = <T,>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
      const streams = Array.from({ length: 10 }, (_, i) => `diff-${i}`);
      const revision = new Map<string, number>();
      const written: { stream: string; ids: readonly string[] }[] = [];
      const seen = { inOneGo: 0, severalEvents: 0, someRefused: 0 };
      /** The event id at each of `positions`, in one database. */
      const idsAt = async (client: pg.Client, positions: readonly (string | null)[]) => {
        const { rows } = await client.query<{ position: string; event_id: string }>('select position::text, event_id::text from es_events where position = any($1::int8[])', [
          positions.filter((p) => p !== null),
        ]);
        const byPosition = new Map(rows.map((r) => [r.position, r.event_id]));
        return positions.map((p) => (p === null ? null : byPosition.get(p)));
      };

      for (let batch = 0; batch < 300; batch++) {
        const parts: FlushPart[] = [];
        const distinct = random() < 0.7;
        const free = [...streams];
        const size = 1 + Math.floor(random() * 6);
        for (let i = 0; i < size; i++) {
          const stream = distinct && free.length > 0 ? (free.splice(Math.floor(random() * free.length), 1)[0] as string) : pick(streams);
          const current = revision.get(stream);
          const roll = random();
          const expected =
            roll < 0.5 ? (current === undefined ? 'no_stream' : String(current))
            : roll < 0.6 ? String((current ?? -1) + 1)
            : roll < 0.72 ? 'any'
            : roll < 0.8 ? 'no_stream'
            : roll < 0.88 ? 'stream_exists'
            : roll < 0.92 ? pick(['x1', '-1', ''])
            : (current === undefined ? 'no_stream' : String(current));
          const count = random() < 0.7 ? 1 : 2 + Math.floor(random() * 2);
          let ids: string[] = Array.from({ length: count }, () => randomUUID());
          const reuse = random();
          const earlier = written.length > 0 ? pick(written) : undefined;
          if (earlier && reuse < 0.06) ids = [...earlier.ids]; // a retry (on its own stream: a duplicate)
          else if (earlier && reuse < 0.09) ids[0] = earlier.ids[0] as string; // an id used before, among new ones
          else if (parts.length > 0 && reuse < 0.12) ids[0] = (parts.at(-1) as FlushPart).ids[0] as string; // repeated in the batch
          const retry = earlier && reuse < 0.06 && random() < 0.7;
          parts.push({
            req: i === 0 || random() < 0.6 ? i : (parts.at(-1) as FlushPart).req,
            stream: retry ? earlier.stream : stream,
            expected,
            ids,
            type: `T${ids.length}`,
            metadata: ids.map(() => (random() < 0.1 ? null : '{}')),
          });
        }
        const [old, now] = [await flushOn(clients[0], parts), await flushOn(clients[1], parts)];
        expect(now, `batch ${batch}: ${JSON.stringify(parts)}`).toMatchObject('error' in old ? { error: old.error } : { outcomes: old.outcomes, revisions: old.revisions });
        if ('error' in old || 'error' in now) continue;
        // One transaction per flush: the appended parts share its id; a retry has its first
        // append's, a refused part none.
        expect(now.commits.map((c) => c === null)).toEqual(old.commits.map((c) => c === null));
        expect(new Set(now.commits.filter((_, i) => now.outcomes[i] === 'appended')).size).toBeLessThanOrEqual(1);
        // Each part's position is the same event's in both logs: its last event, or a retry's first.
        expect(await idsAt(clients[1], now.prepares)).toEqual(await idsAt(clients[0], old.prepares));
        parts.forEach((part, i) => {
          if (old.outcomes[i] !== 'appended') return;
          revision.set(part.stream, Number(old.revisions[i]));
          written.push({ stream: part.stream, ids: part.ids });
        });
        if (old.outcomes.every((o) => o === 'appended')) {
          if (new Set(parts.map((p) => p.stream)).size === parts.length) seen.inOneGo++;
          if (parts.some((p) => p.ids.length > 1)) seen.severalEvents++;
        } else seen.someRefused++;
      }
      const log = async (client: pg.Client) =>
        (await client.query('select stream_id, revision::int, event_id::text, type, data, metadata from es_events order by stream_id, revision')).rows;
      const logs = await Promise.all(clients.map(log));
      expect(logs[1]).toEqual(logs[0]);
      expect(logs[0]?.length).toBeGreaterThan(300);
      // Both of the new version's paths ran many times: batches it wrote in one go, and batches
      // decided request by request (a refused, repeated or retried part).
      expect(seen.inOneGo).toBeGreaterThan(60);
      expect(seen.severalEvents).toBeGreaterThan(20);
      expect(seen.someRefused).toBeGreaterThan(60);
    } finally {
      await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
      await Promise.all([before.drop(), after.drop()]);
    }
  }, 60_000);

  it('refuses a part without an expected revision, on either path, and appends nothing for its request', async () => {
    const db = await createEmptyTestDatabase();
    const client = new pg.Client({ connectionString: db.url });
    try {
      await migrate(db.url, eventStoreMigrations);
      await client.connect();
      const part = (req: number, stream: string, expected: string | null): FlushPart => ({ req, stream, expected, ids: [randomUUID()], type: 'N' });
      // Distinct streams: the batch check fails, and the request-by-request path decides.
      expect(await flushOn(client, [part(0, 'n-a', null), part(1, 'n-b', 'no_stream')])).toMatchObject({
        outcomes: ['wrong_expected_revision', 'appended'],
        revisions: [null, '0'],
      });
      // A stream repeated: straight to the request-by-request path.
      expect(await flushOn(client, [part(0, 'n-c', 'no_stream'), part(1, 'n-c', null), part(1, 'n-d', 'any')])).toMatchObject({
        outcomes: ['appended', 'wrong_expected_revision', 'not_attempted'],
      });
      const { rows } = await client.query<{ stream_id: string }>(`select stream_id from es_events where stream_id like 'n-%' order by stream_id`);
      expect(rows.map((r) => r.stream_id)).toEqual(['n-b', 'n-c']);
    } finally {
      await client.end().catch(() => undefined);
      await db.drop();
    }
  });
});
