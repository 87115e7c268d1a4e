import { z } from 'zod';
import { sql } from '../../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../../shared/event-store/postgres/eventStore.ts';
import { createTestDatabase } from '../../../support/database.ts';
import { eventStoreContract } from '../../../support/contracts/eventStore.ts';

eventStoreContract('PostgreSQL', async () => {
  const db = await createTestDatabase();
  const store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  return {
    store,
    sealing: {
      keysPool: db.pool,
      // The stored jsonb as text, parsed here: nothing of the adapter's read path in between.
      storedData: async (streamId) =>
        (
          await db.pool.anyFirst(sql.type(z.object({ data: z.string() }))`
            select data::text as data from es_events where stream_id = ${streamId} order by revision
          `)
        ).map((text) => JSON.parse(text) as unknown),
      // Whole rows, every column as PostgreSQL gives it.
      storedText: async (streamId) =>
        (
          await db.pool.anyFirst(sql.type(z.object({ row: z.string() }))`
            select to_jsonb(e)::text as row from es_events e where stream_id = ${streamId} order by revision
          `)
        ).join('\n'),
    },
    async teardown() {
      await store.close();
      await db.drop();
    },
  };
});
