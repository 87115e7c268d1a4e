import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql } from '../../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../../shared/event-store/postgres/eventStore.ts';
import { START, type EventStore, type GlobalPosition, type ReadAllPage } from '../../../../shared/event-store/port.ts';
import { createTestDatabase, type TestDatabase } from '../../../support/database.ts';

/**
 * `atHead` on the PostgreSQL adapter's pages: a live reader skips the read that
 * would find nothing only when the page really reached the horizon. A full page, or a filtered
 * page whose scan window was full, is not at the head even when it holds few events.
 */
let db: TestDatabase;
let store: EventStore;

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool, { scanWindow: 10 });
  // 25 entries: A A A A B, five times over.
  for (let i = 0; i < 25; i++) {
    await store.append(`head-${i % 3}`, [{ id: randomUUID(), type: i % 5 === 4 ? 'B' : 'A', data: { i } }]);
  }
});

afterAll(async () => {
  await store.close();
  await db.drop();
});

/** Reads pages of `types` from the start until one says it is at the head. */
async function readToHead(types: readonly string[] | undefined, maxCount: number): Promise<ReadAllPage[]> {
  const pages: ReadAllPage[] = [];
  let after: GlobalPosition = START;
  for (let guard = 0; guard < 50; guard++) {
    const page = await store.readAll({ after, maxCount, ...(types && { eventTypes: types }) });
    pages.push(page);
    if (page.atHead) return pages;
    after = page.checkpoint;
  }
  throw new Error('never reached the head');
}

describe('PostgreSQL readAll: atHead', () => {
  it('unfiltered: a page that is not full is at the head, a full one is not', async () => {
    expect((await store.readAll({ maxCount: 100 })).atHead).toBe(true);
    const pages = await readToHead(undefined, 10);
    expect(pages.map((p) => [p.events.length, p.atHead])).toEqual([
      [10, false],
      [10, false],
      [5, true],
    ]);
  });

  it('filtered: a page whose scan window was full is not at the head, even with room left', async () => {
    const pages = await readToHead(['B'], 100);
    // Windows of 10 entries hold 2, 2 and 1 B events; only the last window was not full.
    expect(pages.map((p) => [p.events.length, p.atHead])).toEqual([
      [2, false],
      [2, false],
      [1, true],
    ]);
    expect(pages.flatMap((p) => p.events.map((e) => (e.data as { i: number }).i))).toEqual([4, 9, 14, 19, 24]);
  });

  it('filtered: nothing after the position is the head', async () => {
    const head = await store.headPosition();
    const page = await store.readAll({ after: head, eventTypes: ['B'] });
    expect(page).toMatchObject({ events: [], atHead: true });
  });

  it('the append and read functions keep generic plans and index lookups (set on the function, restated when replaced)', async () => {
    const rows = await db.pool.any(sql.type(z.object({ proname: z.string(), config: z.array(z.string()) }))`
      select proname, coalesce(proconfig, '{}') as config from pg_proc
      where proname in ('es_append_batch', 'es_append', 'es_read_page') order by proname
    `);
    // es_append_batch twice: 012 added an overload that carries the wake-up.
    expect(rows.map((r) => r.proname)).toEqual(['es_append', 'es_append_batch', 'es_append_batch', 'es_read_page']);
    for (const row of rows) {
      expect(row.config).toContain('plan_cache_mode=force_generic_plan');
      expect(row.config).toContain('enable_seqscan=off');
    }
  });
});
