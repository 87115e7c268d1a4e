import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { sql } from '../../../shared/db/pool.ts';
import { defineProjection } from '../../../shared/projections/projection.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import { useTestEventStore } from '../../support/database.ts';

/**
 * Regression: the swap transaction of a replay reads the PostgreSQL store (same slonik pool
 * family) and slonik refused it as "a query inside a transaction using a foreign connection",
 * so every replay, and so every first start of a projector, failed.
 */
const ids = defineProjection({
  name: 'replay_ids',
  version: 1,
  eventTypes: ['Seen'],
  tables: { replay_ids: (table) => [sql.fragment`create table ${table} (id uuid primary key)`] },
  async handle(tx, events, tables) {
    for (const event of events) await tx.query(sql.type(z.object({}))`insert into ${tables.replay_ids} (id) values (${event.id})`);
  },
});

describe('when a projection is replayed over the PostgreSQL store', () => {
  const fixture = useTestEventStore();

  it('builds the model, swaps it in and checkpoints it', async () => {
    const { db, store } = fixture;
    const events = Array.from({ length: 5 }, () => ({ id: randomUUID(), type: 'Seen', data: {} }));
    const { position } = await store.append(`seen-${randomUUID()}`, events);
    const result = await replayProjection(db.pool, store, ids, { batchSize: 2 });
    expect(result.processed).toBe(5);
    const stored = await db.pool.anyFirst(sql.type(z.object({ id: z.string() }))`select id::text from replay_ids order by id`);
    expect(stored).toEqual(events.map((e) => e.id).sort());
    expect((await readCheckpoint(db.pool, ids.name))?.position).toEqual(position);
  });
});
