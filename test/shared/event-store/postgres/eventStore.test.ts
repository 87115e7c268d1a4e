import { createPostgresEventStore } from '../../../../shared/event-store/postgres/eventStore.ts';
import { createTestDatabase } from '../../../support/database.ts';
import { eventStoreContract } from '../../../support/contracts/eventStore.ts';

eventStoreContract('PostgreSQL', async () => {
  const db = await createTestDatabase();
  const store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  return {
    store,
    async teardown() {
      await store.close();
      await db.drop();
    },
  };
});
