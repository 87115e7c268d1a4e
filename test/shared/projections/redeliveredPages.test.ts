import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { comparePositions, type EventStore, type ReadAllPage } from '../../../shared/event-store/port.ts';
import { defineProjection } from '../../../shared/projections/projection.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';

/**
 * A subscription that drops and resumes from an older position hands some events over again
 * (EventStoreDB after a reconnect, a PostgreSQL reader after a failover). The runner must drop
 * every event at or before its checkpoint, and never move its checkpoint backwards.
 */
const counting = defineProjection({
  name: 'redelivery_counts',
  version: 1,
  eventTypes: ['Counted'],
  tables: {
    redelivery_counts: (table) => [sql.fragment`create table ${table} (stream_id text primary key, n integer not null)`],
  },
  async handle(tx, events, tables) {
    for (const event of events) {
      await tx.query(sql.type(z.object({}))`
        insert into ${tables.redelivery_counts} (stream_id, n) values (${event.streamId}, 1)
        on conflict (stream_id) do update set n = ${tables.redelivery_counts}.n + 1
      `);
    }
  },
});

/** Yields every page twice, and the two pages before it again first: what a resubscribing adapter may do. */
function redelivering(inner: EventStore): EventStore {
  return {
    append: (...args) => inner.append(...args),
    appendMany: (...args) => inner.appendMany(...args),
    readStream: (...args) => inner.readStream(...args),
    readAll: (...args) => inner.readAll(...args),
    headPosition: () => inner.headPosition(),
    ping: () => inner.ping(),
    close: () => inner.close(),
    async *subscribeToAll(options) {
      const seen: ReadAllPage[] = [];
      for await (const page of inner.subscribeToAll(options)) {
        yield* seen.slice(-2); // resumed from an older position: the last two pages again
        yield page;
        yield page;
        seen.push(page);
      }
    },
  };
}

describe('when a subscription redelivers pages after a reconnect', () => {
  let db: TestDatabase;
  let store: EventStore;
  let projector: ProjectorHandle;
  const stream = `counted-${randomUUID()}`;
  const counted = (n: number) => Array.from({ length: n }, () => ({ id: randomUUID(), type: 'Counted', data: {} }));

  beforeAll(async () => {
    db = await createTestDatabase();
    store = createPostgresEventStore(db.pool, { listenUrl: db.url });
    await store.append(stream, counted(3));
    // Built and checkpointed at the start already: this test is about following, not rebuilding.
    await db.pool.query(sql.type(z.object({}))`create table redelivery_counts (stream_id text primary key, n integer not null)`);
    await db.pool.query(sql.type(z.object({}))`
      insert into projection_checkpoints (name, version, commit_position, prepare_position) values (${counting.name}, ${counting.version}, 0, 0)
    `);
    projector = runProjection(db.pool, redelivering(store), counting, { batchSize: 2, pollIntervalMs: 20 });
  });
  afterAll(async () => {
    await projector?.stop();
    await store?.close();
    await db?.drop();
  });

  const count = () => db.pool.oneFirst(sql.type(z.object({ n: z.number() }))`select n from redelivery_counts where stream_id = ${stream}`);

  it('applies each live event exactly once and keeps the checkpoint monotonic', async () => {
    let total = 3;
    for (let round = 0; round < 4; round++) {
      const before = await readCheckpoint(db.pool, counting.name);
      const { position } = await store.append(stream, counted(round + 1));
      total += round + 1;
      expect(await waitForCheckpoint(db.pool, counting.name, position, 10_000)).toBe(true);
      const after = await readCheckpoint(db.pool, counting.name);
      if (before && after) expect(comparePositions(after.position, before.position)).toBeGreaterThanOrEqual(0);
    }
    // Once caught up, let the redelivered tail pages go through before asserting.
    const last = await store.append(stream, counted(1));
    total += 1;
    expect(await waitForCheckpoint(db.pool, counting.name, last.position, 10_000)).toBe(true);
    expect(await count()).toBe(total);
    expect((await readCheckpoint(db.pool, counting.name))?.eventsApplied).toBe(total);
  });
});
