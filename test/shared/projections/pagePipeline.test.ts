import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { QuerySqlToken } from 'slonik';
import { z } from 'zod';
import { sql } from '../../../shared/db/pool.ts';
import { sqlStateOf } from '../../../shared/db/sqlState.ts';
import { classifyFailure } from '../../../shared/projections/failures.ts';
import { createPagePipeline, type PagePipeline } from '../../../shared/projections/pagePipeline.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';

/**
 * The live page transaction on a pipelined connection (pagePipeline.ts), against real
 * PostgreSQL: a stand-in checkpoint row (`marks`), compared and set as the runner does, and a
 * handler writing `notes`.
 */
describe('the page pipeline', () => {
  let db: TestDatabase;
  let pipeline: PagePipeline;
  const applicationName = 'page-pipeline-test';

  beforeAll(async () => {
    db = await createTestDatabase();
    await db.pool.query(sql.type(z.object({}))`create table marks (name text primary key, position int not null)`);
    await db.pool.query(sql.type(z.object({}))`create table notes (id int primary key, text text not null)`);
  });
  afterAll(async () => {
    await db?.drop();
  });
  beforeEach(async () => {
    await db.pool.query(sql.type(z.object({}))`truncate marks, notes`);
    await db.pool.query(sql.type(z.object({}))`insert into marks values ('m', 0)`);
    pipeline = createPagePipeline(db.url, { applicationName });
  });
  afterEach(async () => {
    await pipeline.end();
  });

  const moveMark = (from: number, to: number) =>
    sql.type(
      z.object({ position: z.number() }),
    )`update marks set position = ${to} where name = 'm' and position = ${from} returning position`;
  const note = (id: number, text: string) => sql.type(z.object({}))`insert into notes (id, text) values (${id}, ${text})`;
  const notes = () => db.pool.anyFirst(sql.type(z.object({ text: z.string() }))`select text from notes order by id`);
  const mark = () => db.pool.oneFirst(sql.type(z.object({ position: z.number() }))`select position from marks where name = 'm'`);

  it('commits the handler’s statements with the mark, and answers with the mark’s row', async () => {
    const moved = await pipeline.page(moveMark(0, 1), async (tx) => {
      await tx.query(note(1, 'a'));
      // a read inside the page sees the page's own writes
      expect(await tx.anyFirst(sql.type(z.object({ text: z.string() }))`select text from notes`)).toEqual(['a']);
      await tx.query(note(2, 'b'));
    });
    expect(moved).toEqual([{ position: 1 }]);
    expect(await notes()).toEqual(['a', 'b']);
    expect(await mark()).toBe(1);
  });

  it('prepares its statements once per connection, and a prepared statement follows a swapped table', async () => {
    await pipeline.page(moveMark(0, 1), async (tx) => {
      await tx.query(note(1, 'a'));
    });
    let prepared: readonly unknown[] = [];
    await pipeline.page(moveMark(1, 2), async (tx) => {
      prepared = await tx.anyFirst(sql.type(z.object({ statement: z.string() }))`
        select statement from pg_prepared_statements where name like 'projector_page_%' order by prepare_time
      `);
      await tx.query(note(2, 'b'));
    });
    // The first page prepared the compare-and-set and the insert; the second ran them by name
    // (and prepared only its new statement, this read).
    expect(prepared).toEqual([
      expect.stringContaining('update marks'),
      expect.stringContaining('insert into notes'),
      expect.stringContaining('pg_prepared_statements'),
    ]);
    // A replay swaps tables under a prepared statement: PostgreSQL analyses its text again.
    await db.pool.query(sql.type(z.object({}))`alter table notes rename to notes_before`);
    await db.pool.query(sql.type(z.object({}))`create table notes (id int primary key, text text not null)`);
    try {
      await pipeline.page(moveMark(2, 3), async (tx) => {
        await tx.query(note(3, 'c'));
      });
      expect(await notes()).toEqual(['c']);
      expect(await db.pool.anyFirst(sql.type(z.object({ text: z.string() }))`select text from notes_before order by id`)).toEqual([
        'a',
        'b',
      ]);
    } finally {
      await db.pool.query(sql.type(z.object({}))`drop table notes`);
      await db.pool.query(sql.type(z.object({}))`alter table notes_before rename to notes`);
    }
  });

  it('rolls everything back when the mark is not where the page expects it', async () => {
    const moved = await pipeline.page(moveMark(5, 6), async (tx) => {
      await tx.query(note(1, 'a'));
    });
    expect(moved).toBeUndefined();
    expect(await notes()).toEqual([]);
    expect(await mark()).toBe(0);
  });

  it('fails with the first error when a statement fails, commits nothing, and the next page runs on the same connection', async () => {
    await db.pool.query(sql.type(z.object({}))`insert into notes values (1, 'taken')`);
    const failed = pipeline.page(moveMark(0, 1), async (tx) => {
      await tx.query(note(2, 'b'));
      await tx.query(note(1, 'duplicate'));
      await tx.query(note(3, 'c'));
    });
    await expect(failed).rejects.toSatisfy((error: unknown) => sqlStateOf(error) === '23505');
    expect(await notes()).toEqual(['taken']);
    expect(await mark()).toBe(0);
    const backends = () =>
      db.pool.anyFirst(
        sql.type(z.object({ pid: z.number() }))`select pid from pg_stat_activity where application_name = ${applicationName}`,
      );
    const before = await backends();
    expect(await pipeline.page(moveMark(0, 1), (tx) => tx.query(note(2, 'b')).then(() => undefined))).toEqual([{ position: 1 }]);
    expect(await notes()).toEqual(['taken', 'b']);
    expect(await backends()).toEqual(before);
  });

  it('does not commit a page whose handler caught a failed statement', async () => {
    await db.pool.query(sql.type(z.object({}))`insert into notes values (1, 'taken')`);
    const failed = pipeline.page(moveMark(0, 1), async (tx) => {
      await tx.query(note(1, 'duplicate')).catch(() => undefined);
      await tx.query(note(2, 'b')).catch(() => undefined); // refused: the transaction is aborted
    });
    await expect(failed).rejects.toSatisfy((error: unknown) => sqlStateOf(error) === '23505');
    expect(await notes()).toEqual(['taken']);
    expect(await mark()).toBe(0);
  });

  it('sends BEGIN, the mark and the handler’s first statement in one write, and COMMIT in a second', async () => {
    // Warm the connection first (connecting writes too), then count what reaches the socket.
    await pipeline.page(moveMark(0, 1), async () => undefined);
    const { Socket } = await import('node:net');
    const writes: number[] = [];
    const original = { write: Socket.prototype._write, writev: Socket.prototype._writev };
    Socket.prototype._write = function (this: InstanceType<typeof Socket>, ...args: Parameters<typeof original.write>) {
      writes.push(1);
      return original.write.apply(this, args);
    };
    Socket.prototype._writev = function (this: InstanceType<typeof Socket>, ...args: Parameters<NonNullable<typeof original.writev>>) {
      writes.push(args[0].length);
      return original.writev?.apply(this, args);
    };
    try {
      await pipeline.page(moveMark(1, 2), async (tx) => {
        await tx.query(note(1, 'a'));
      });
    } finally {
      Socket.prototype._write = original.write;
      Socket.prototype._writev = original.writev;
    }
    expect(writes).toHaveLength(2);
    expect(await notes()).toEqual(['a']);
  });

  it('fails transiently when its connection is lost mid-page, and the next page opens a new one', async () => {
    const failed = pipeline.page(moveMark(0, 1), async (tx) => {
      await tx.query(note(1, 'a'));
      await db.pool.query(
        sql.type(z.object({}))`select pg_terminate_backend(pid) from pg_stat_activity where application_name = ${applicationName}`,
      );
      await tx.query(note(2, 'b'));
    });
    const error = await failed.then(
      () => undefined,
      (e: unknown) => e,
    );
    // whether pg learned of it from the statement in flight or between two statements
    expect(sqlStateOf(error)).toBe('08006');
    expect(classifyFailure(error)).toBe('transient');
    expect(await notes()).toEqual([]);
    expect(await pipeline.page(moveMark(0, 1), (tx) => tx.query(note(1, 'a')).then(() => undefined))).toEqual([{ position: 1 }]);
    expect(await notes()).toEqual(['a']);
  });

  it('runs a page again at once after a serialization failure, as slonik’s transactions do', async () => {
    let runs = 0;
    const moved = await pipeline.page(moveMark(0, 1), async (tx) => {
      runs++;
      if (runs === 1) await tx.query(sql.type(z.object({}))`do $$ begin raise exception 'conflict' using errcode = '40001'; end $$`);
      await tx.query(note(1, 'a'));
    });
    expect(runs).toBe(2);
    expect(moved).toEqual([{ position: 1 }]);
    expect(await notes()).toEqual(['a']);
  });

  it('fails deterministically on a value pg cannot send, and the next page runs on a new connection', async () => {
    const backend = () =>
      db.pool.maybeOneFirst(
        sql.type(z.object({ pid: z.number() }))`select pid from pg_stat_activity where application_name = ${applicationName}`,
      );
    await pipeline.page(moveMark(0, 1), async () => undefined);
    const first = await backend();
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    // slonik refuses such a value itself; built by hand, the statement reaches pg, which fails to bind it
    const unsendable = {
      ...sql.type(z.object({}))`insert into notes (id, text) values (1, ${'placeholder'})`,
      values: [circular],
    } as unknown as QuerySqlToken;
    const failed = pipeline.page(moveMark(1, 2), async (tx) => {
      await tx.query(unsendable);
    });
    const error = await failed.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(Error);
    expect(classifyFailure(error)).toBe('deterministic');
    expect(await mark()).toBe(1);
    expect(await pipeline.page(moveMark(1, 2), (tx) => tx.query(note(1, 'a')).then(() => undefined))).toEqual([{ position: 2 }]);
    expect(await backend()).not.toBe(first);
  });
});
