import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabasePool, type DatabasePool } from '../../../shared/db/pool.ts';
import { migrate } from '../../../shared/db/migrate.ts';
import { WrongExpectedRevisionError } from '../../../shared/errors.ts';
import { createPostgresEventStore, eventStoreMigrations } from '../../../shared/event-store/postgres.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';

/**
 * Migration 010 on a log written before it (issue 11): es_streams held every stream's revision
 * until then; afterwards the appends read it from the log, and the table is gone. A deployment
 * that upgrades must go on deciding every append exactly as before, on streams written by the
 * old functions (group commit's flush and the older single `es_append`).
 */
const before010 = eventStoreMigrations.slice(0, eventStoreMigrations.findIndex((m) => m.id.startsWith('event-store/010')));

let adminUrl: string;
let name: string;
let url: string;
let pool: DatabasePool;
let store: EventStore;
const run = randomUUID().slice(0, 8);
const ids = { a0: randomUUID(), a1: randomUUID(), a2: randomUUID(), b0: randomUUID(), c0: randomUUID() };

async function sqlOn<T extends pg.QueryResultRow>(text: string, values: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<T>(text, values)).rows;
  } finally {
    await client.end();
  }
}

beforeAll(async () => {
  const admin = process.env.TEST_PG_ADMIN_URL;
  if (!admin) throw new Error('TEST_PG_ADMIN_URL is not set: run the tests through vitest');
  adminUrl = admin;
  name = `t_upgrade_${randomBytes(4).toString('hex')}`;
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  await client.query(`create database "${name}"`);
  await client.end();
  const parsed = new URL(adminUrl);
  parsed.pathname = `/${name}`;
  url = parsed.toString();
  await migrate(url, before010);
  pool = await createDatabasePool(url, { maximumPoolSize: 4 });
  // Written by the functions as they were before 010 (the flush's, then es_append's).
  const old = createPostgresEventStore(pool);
  await old.append(`${run}-a`, [{ id: ids.a0, type: 'A', data: {} }, { id: ids.a1, type: 'A', data: {} }], { expectedRevision: 'no_stream' });
  await old.appendMany([
    { streamId: `${run}-a`, events: [{ id: ids.a2, type: 'A', data: {} }], expectedRevision: 1 },
    { streamId: `${run}-b`, events: [{ id: ids.b0, type: 'B', data: {} }], expectedRevision: 'no_stream' },
  ]);
  await old.close();
  await sqlOn(`select * from es_append($1, 'no_stream', array[$2]::uuid[], array['C'], array['{}']::jsonb[], array['{}']::jsonb[])`, [`${run}-c`, ids.c0]);
  expect(await sqlOn('select stream_id, revision::int from es_streams order by stream_id')).toEqual([
    { stream_id: `${run}-a`, revision: 2 },
    { stream_id: `${run}-b`, revision: 0 },
    { stream_id: `${run}-c`, revision: 0 },
  ]);
  await migrate(url, eventStoreMigrations);
  store = createPostgresEventStore(pool);
});

afterAll(async () => {
  await store?.close();
  await pool?.end();
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  await client.query(`drop database if exists "${name}" with (force)`);
  await client.end();
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
