import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { WrongExpectedRevisionError } from '../../../../shared/errors.ts';
import type { AppendResult, NewEvent } from '../../../../shared/event-store/port.ts';
import { createPostgresEventStore } from '../../../../shared/event-store/postgres/eventStore.ts';
import { createTestDatabase, sqlAt, useTestEventStore } from '../../../support/database.ts';
import { waitFor } from '../../../support/waitFor.ts';

/**
 * Group commit in the PostgreSQL adapter: appends that queue while a flush is in
 * flight go together in the next one, one statement and one transaction, with outcomes per
 * request. Requests of one flush share a transaction id, which is how these tests see a batch.
 */
const event = (type: string): NewEvent => ({ id: randomUUID(), type, data: {} });

/** The pids of this database's backends opened under `applicationName` (the adapter names its connections). */
const backends = async (client: pg.Client, applicationName: string) =>
  (
    await client.query<{ pid: number }>(`select pid from pg_stat_activity where datname = current_database() and application_name = $1`, [
      applicationName,
    ])
  ).rows.map((r) => r.pid);

describe('group commit (PostgreSQL adapter)', () => {
  const fixture = useTestEventStore();

  describe('when one request of a batch conflicts', () => {
    it('fails that request alone and commits the others in one transaction', async () => {
      const { store } = fixture;
      const run = randomUUID().slice(0, 8);
      await store.append(`${run}-taken`, [event('Existing')], { expectedRevision: 'no_stream' });
      // The first call flushes at once; the ones made meanwhile queue and go in one flush.
      const blocker = store.append(`${run}-first`, [event('First')]);
      const attempts = [
        store.append(`${run}-a`, [event('A')], { expectedRevision: 'no_stream' }),
        store.append(`${run}-taken`, [event('Late')], { expectedRevision: 'no_stream' }),
        store.append(`${run}-b`, [event('B')], { expectedRevision: 'no_stream' }),
        store.appendMany([
          { streamId: `${run}-c`, events: [event('C')], expectedRevision: 'no_stream' },
          { streamId: `${run}-d`, events: [event('D')], expectedRevision: 'no_stream' },
        ]),
      ];
      const settled = await Promise.allSettled([blocker, ...attempts]);
      const [, a, taken, b, cd] = settled;
      expect(taken?.status).toBe('rejected');
      expect(taken?.status === 'rejected' && taken.reason).toBeInstanceOf(WrongExpectedRevisionError);
      expect(taken?.status === 'rejected' && taken.reason).toMatchObject({ streamId: `${run}-taken`, actual: 0 });
      expect([a, b, cd].map((s) => s?.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled']);
      const commits = [a, b].map((s) => (s?.status === 'fulfilled' ? (s.value as AppendResult).position.commit : -1n));
      if (cd?.status === 'fulfilled') commits.push(...(cd.value as AppendResult[]).map((r) => r.position.commit));
      expect(new Set(commits).size).toBe(1); // one transaction for the whole batch
      expect((await store.readStream(`${run}-taken`)).map((e) => e.type)).toEqual(['Existing']);
      for (const s of ['a', 'b', 'c', 'd']) expect(await store.readStream(`${run}-${s}`)).toHaveLength(1);
    });
  });

  describe('when requests for the same stream are in one batch', () => {
    it('decides each on the effects of the ones before it, in order', async () => {
      const { store } = fixture;
      const stream = `same-${randomUUID()}`;
      const blocker = store.append(`blocker-${randomUUID()}`, [event('First')]);
      const first = store.append(stream, [event('E0')], { expectedRevision: 'no_stream' });
      const second = store.append(stream, [event('E1'), event('E2')], { expectedRevision: 0 });
      const stale = store.append(stream, [event('Stale')], { expectedRevision: 0 });
      const third = store.append(stream, [event('E3')], { expectedRevision: 2 });
      const retried = [event('E4')];
      const fourth = store.append(stream, retried, { expectedRevision: 'stream_exists' });
      const retry = store.append(stream, retried, { expectedRevision: 3 });
      await blocker;
      const results = await Promise.all([first, second, third, fourth, retry]);
      await expect(stale).rejects.toMatchObject({ streamId: stream, actual: 2 });
      expect(results.map((r) => r.nextRevision)).toEqual([0, 2, 3, 4, 4]);
      expect(new Set(results.map((r) => r.position.commit)).size).toBe(1);
      expect(results[4]?.position).toEqual(results[3]?.position); // the retry answered from the append it repeats
      const events = await store.readStream(stream);
      expect(events.map((e) => [e.type, e.revision])).toEqual([
        ['E0', 0],
        ['E1', 1],
        ['E2', 2],
        ['E3', 3],
        ['E4', 4],
      ]);
    });
  });

  describe('when a batch of distinct streams carries a retry of an earlier append', () => {
    it('answers the retry with its first position and appends the others in one transaction', async () => {
      const { store } = fixture;
      const run = randomUUID().slice(0, 8);
      const retried = event('Once');
      const original = await store.append(`${run}-retried`, [retried], { expectedRevision: 'no_stream' });
      const blocker = store.append(`${run}-first`, [event('First')]);
      // Distinct streams and ids: the flush decides them as a whole, finds the retried id in the
      // log and decides the batch again request by request.
      const [retry, a, b] = await Promise.all([
        store.append(`${run}-retried`, [retried], { expectedRevision: 'no_stream' }),
        store.append(`${run}-a`, [event('A')], { expectedRevision: 'no_stream' }),
        store.append(`${run}-b`, [event('B')], { expectedRevision: 'no_stream' }),
      ]);
      await blocker;
      expect(retry).toEqual(original);
      expect(a?.position.commit).toBe(b?.position.commit); // one flush
      expect(a?.position.commit).not.toBe(original.position.commit);
      expect((await store.readStream(`${run}-retried`)).map((e) => e.id)).toEqual([retried.id]);
      for (const s of ['a', 'b']) expect(await store.readStream(`${run}-${s}`)).toHaveLength(1);
    });
  });

  describe('when two stores (two gateways) flush batches over the same streams at once', () => {
    it('never deadlocks: streams are locked in one order by every writer', async () => {
      const { db, store } = fixture;
      const second = createPostgresEventStore(db.pool);
      const run = randomUUID().slice(0, 8);
      const streams = Array.from({ length: 5 }, (_, i) => `${run}-hot-${i}`);
      let appended = 0;
      const worker = async (target: typeof store, w: number) => {
        for (let n = 0; n < 40; n++) {
          // Opposite orders from the two stores, overlapping sets.
          const [i, j] = w % 2 === 0 ? [n % 5, (n + 1) % 5] : [(n + 1) % 5, n % 5];
          await target.appendMany([
            { streamId: streams[i] ?? '', events: [event('Hot')] },
            { streamId: streams[j] ?? '', events: [event('Hot')] },
          ]);
          appended += 2;
        }
      };
      try {
        await Promise.all(Array.from({ length: 16 }, (_, w) => worker(w < 8 ? store : second, w)));
      } finally {
        await second.close();
      }
      expect(appended).toBe(16 * 40 * 2);
      let total = 0;
      for (const stream of streams) {
        const events = await store.readStream(stream);
        expect(events.map((e) => e.revision)).toEqual(events.map((_, k) => k));
        total += events.length;
      }
      expect(total).toBe(appended);
    }, 60_000);
  });

  describe('when the flushing backend dies mid-transaction', () => {
    it('leaves nothing of the batch behind, and the store goes on', async () => {
      const { db, store } = fixture;
      const run = randomUUID().slice(0, 8);
      const contested = randomUUID();
      // Another transaction holds an uncommitted event with `contested` as its id: the flush
      // inserts its first request's event, then waits on that id's index entry.
      const other = new pg.Client({ connectionString: db.url });
      await other.connect();
      try {
        await other.query('begin');
        await other.query(`insert into es_events (stream_id, revision, event_id, type, data) values ($1, 0, $2, 'Other', '{}')`, [
          `${run}-other`,
          contested,
        ]);
        const blocker = store.append(`${run}-first`, [event('First')]);
        const written = store.append(`${run}-written`, [event('Written')], { expectedRevision: 'no_stream' });
        const stuck = store.appendMany([
          { streamId: `${run}-x`, events: [event('X')], expectedRevision: 'no_stream' },
          { streamId: `${run}-y`, events: [{ id: contested, type: 'Y', data: {} }], expectedRevision: 'no_stream' },
        ]);
        // Settled as soon as the backend dies, which can be before pg_terminate_backend answers.
        const failed = Promise.allSettled([written, stuck]);
        await blocker;
        const pid = await waitFor(async () => {
          const { rows } = await other.query<{ pid: number }>(
            `select pid from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and pid <> pg_backend_pid()`,
          );
          return rows[0]?.pid;
        });
        // Mid-flush: the batch's transaction has written rows (the first events).
        await other.query('select pg_terminate_backend($1)', [pid]);
        expect((await failed).map((outcome) => outcome.status)).toEqual(['rejected', 'rejected']);
        await other.query('rollback');
      } finally {
        await other.end();
      }
      for (const s of ['written', 'x', 'y']) expect(await store.readStream(`${run}-${s}`)).toEqual([]);
      const check = new pg.Client({ connectionString: db.url });
      await check.connect();
      try {
        const streams = await check.query('select distinct stream_id from es_events where stream_id like $1', [`${run}-%`]);
        expect(streams.rows.map((r: { stream_id: string }) => r.stream_id)).toEqual([`${run}-first`]);
      } finally {
        await check.end();
      }
      const after = await store.append(`${run}-written`, [event('Again')], { expectedRevision: 'no_stream' });
      expect(after.nextRevision).toBe(0);
    });
  });

  describe('its own connections (one per flush in flight, and one for wake-ups)', () => {
    it('opens again after losing one between flushes, and closes them all on close()', async () => {
      const { db } = fixture;
      const check = new pg.Client({ connectionString: db.url });
      await check.connect();
      // A minute between wake-ups carried by flushes: the first flush carries one, the later ones
      // owe one, which close() sends on the notify connection.
      const mine = createPostgresEventStore(db.pool, { maxConcurrentFlushes: 2, wakeIntervalMs: 60_000 });
      try {
        const before = await backends(check, 'event-store-append');
        const notifyBefore = await backends(check, 'event-store-notify');
        const run = randomUUID().slice(0, 8);
        await mine.append(`${run}-a`, [event('A')], { expectedRevision: 'no_stream' });
        const opened = (await backends(check, 'event-store-append')).filter((pid) => !before.includes(pid));
        expect(opened).toHaveLength(1); // one flush in flight so far, one connection
        await check.query('select pg_terminate_backend($1)', [opened[0]]);
        // pg reports the loss; the next flush opens a new connection.
        await waitFor(async () => !(await backends(check, 'event-store-append')).includes(opened[0] ?? -1));
        const result = await waitFor(async () => mine.append(`${run}-a`, [event('A2')], { expectedRevision: 0 }).catch(() => undefined));
        expect(result.nextRevision).toBe(1);
        // Both wake-ups so far: one in the first flush's transaction, one owed for a minute.
        expect((await backends(check, 'event-store-notify')).filter((pid) => !notifyBefore.includes(pid))).toEqual([]);
        expect((await mine.readStream(`${run}-a`)).map((e) => e.type)).toEqual(['A', 'A2']);
        await mine.close();
        const left = (await backends(check, 'event-store-append')).filter((pid) => !before.includes(pid));
        expect(left).toEqual([]);
        // close() sent the owed wake-up on the notify connection, and ended it too.
        expect((await backends(check, 'event-store-notify')).filter((pid) => !notifyBefore.includes(pid))).toEqual([]);
      } finally {
        await mine.close();
        await check.end();
      }
    });
  });

  describe('the wake-ups of live readers (NOTIFY es_events)', () => {
    // The schedule's every rule is in wakeupSchedule.unit.test.ts; this is the adapter on PostgreSQL,
    // with an interval long enough for a loaded machine.
    it('ride on a flush when the last is old enough, and otherwise come alone one interval later', async () => {
      const { db } = fixture;
      const listener = new pg.Client({ connectionString: db.url });
      await listener.connect();
      const heard: number[] = [];
      listener.on('notification', (n) => {
        if (n.channel === 'es_events') heard.push(performance.now());
      });
      await listener.query('listen es_events');
      const mine = createPostgresEventStore(db.pool, { wakeIntervalMs: 1_000 });
      const check = new pg.Client({ connectionString: db.url });
      await check.connect();
      try {
        const notifiers = async () => (await backends(check, 'event-store-notify')).length;
        const notifiersBefore = await notifiers();
        const run = randomUUID().slice(0, 8);
        await mine.append(`${run}-a`, [event('A')]);
        const firstSettled = performance.now();
        // The first flush carried its wake-up: heard, with no notify connection opened.
        await waitFor(() => heard.length >= 1);
        expect(await notifiers()).toBe(notifiersBefore);
        // The next ones come within the interval: they owe one wake-up, sent alone an interval
        // after the first.
        await mine.append(`${run}-b`, [event('B')]);
        await mine.append(`${run}-c`, [event('C')]);
        await waitFor(() => heard.length >= 2);
        expect(heard[1]! - firstSettled).toBeGreaterThanOrEqual(900);
        expect(await notifiers()).toBe(notifiersBefore + 1);
        // A commit after a quiet interval carries its own again: the interval passing is the input.
        await new Promise((r) => setTimeout(r, 1_100));
        const count = heard.length;
        await mine.append(`${run}-d`, [event('D')]);
        await waitFor(() => heard.length > count);
      } finally {
        await mine.close();
        await listener.end();
        await check.end();
      }
    });
  });

  describe('when PostgreSQL refuses NOTIFY (its notification queue is full)', () => {
    it('appends without the wake-up, and the appends succeed', async () => {
      const db = await createTestDatabase();
      try {
        // A stand-in for the full queue: pg_notify, found before pg_catalog's, fails as PostgreSQL
        // does then (SQLSTATE 54000), in the flush's transaction and on the notify connection.
        await sqlAt(
          db.url,
          `create function public.pg_notify(text, text) returns void language plpgsql as $fn$
          begin raise exception 'too many notifications in the NOTIFY queue' using errcode = '54000'; end $fn$`,
        );
        await sqlAt(db.url, `alter database "${db.name}" set search_path = public, pg_catalog`);
        const mine = createPostgresEventStore(db.pool, { wakeIntervalMs: 5 });
        try {
          const run = randomUUID().slice(0, 8);
          const first = await mine.append(`${run}-a`, [event('A')], { expectedRevision: 'no_stream' });
          expect(first.nextRevision).toBe(0);
          await new Promise((r) => setTimeout(r, 20)); // the next flush may carry one again
          const results = await Promise.all(
            ['b', 'c', 'd'].map((s) => mine.append(`${run}-${s}`, [event(s)], { expectedRevision: 'no_stream' })),
          );
          expect(results.map((r) => r.nextRevision)).toEqual([0, 0, 0]);
          for (const s of ['a', 'b', 'c', 'd']) expect(await mine.readStream(`${run}-${s}`)).toHaveLength(1);
        } finally {
          await mine.close();
        }
      } finally {
        await db.drop();
      }
    });
  });

  describe('when the writing process is killed with SIGKILL mid-flush', () => {
    it('loses no acknowledged append and commits no create by halves or twice', async () => {
      const { db, store } = fixture;
      const runId = `kill-${randomUUID().slice(0, 8)}`;
      const child = spawn(process.execPath, [resolve(import.meta.dirname, '../../../support/appendingChild.ts')], {
        env: { ...process.env, DATABASE_URL: db.url, RUN_ID: runId, WORKERS: '16' },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      const acked = new Set<number>();
      let buffered = '';
      child.stdout.on('data', (chunk: Buffer) => {
        buffered += chunk.toString();
        const lines = buffered.split('\n');
        buffered = lines.pop() ?? '';
        for (const line of lines) {
          const match = /^ack (\d+)$/.exec(line);
          if (match?.[1]) acked.add(Number(match[1]));
        }
      });
      const exited = new Promise<NodeJS.Signals | null>((r) => child.once('exit', (_code, signal) => r(signal)));
      await waitFor(async () => acked.size >= 300, 60_000);
      child.kill('SIGKILL');
      expect(await exited).toBe('SIGKILL');

      const check = new pg.Client({ connectionString: db.url });
      await check.connect();
      try {
        // A transaction the dead process left open aborts when its backend notices; wait for it.
        await waitFor(async () => {
          const { rows } = await check.query(
            `select 1 from pg_stat_activity where datname = current_database() and query like '%es_append_batch%' and state <> 'idle' and pid <> pg_backend_pid()`,
          );
          return rows.length === 0;
        });
        const { rows } = await check.query<{ stream_id: string; events: string; max_revision: string }>(
          `select stream_id, count(*)::text as events, max(revision)::text as max_revision from es_events where stream_id like $1 group by stream_id`,
          [`${runId}-%`],
        );
        const streams = new Map(rows.map((r) => [r.stream_id, r]));
        for (const row of rows) {
          expect(row.events).toBe('1'); // never twice
          expect(row.max_revision).toBe('0');
        }
        for (const n of acked) {
          expect(streams.has(`${runId}-reservation-${n}`)).toBe(true); // nothing acknowledged is lost
          expect(streams.has(`${runId}-employee-${n}`)).toBe(true);
        }
        const numbers = new Set(rows.map((r) => Number(/-(\d+)$/.exec(r.stream_id)?.[1])));
        for (const n of numbers) {
          // all or nothing: both halves of every create, or neither
          expect(streams.has(`${runId}-reservation-${n}`)).toBe(streams.has(`${runId}-employee-${n}`));
        }
        console.info(`[kill -9] ${acked.size} creates acknowledged before the kill, ${numbers.size} committed`);
      } finally {
        await check.end();
      }
      // The store is usable afterwards, and the log reads through it.
      expect((await store.readAll({ maxCount: 10 })).events.length).toBeGreaterThan(0);
    }, 120_000);
  });
});
