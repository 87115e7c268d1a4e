import { describe } from 'vitest';
import { connectEventStoreDb, createEventStoreDbEventStore } from '../../../../shared/event-store/eventstoredb/eventStore.ts';
import { eventStoreContract } from '../../../support/contracts/eventStore.ts';

const url = process.env.EVENTSTORE_URL;

if (!url) {
  console.warn(
    '[skip] EventStoreDB contract: EVENTSTORE_URL not set — start a KurrentDB node and run ' +
      '`docker compose up -d kurrentdb && EVENTSTORE_URL="kurrentdb://localhost:2113?tls=false" npx vitest run test/shared/event-store` (see docs/operations.md).',
  );
}

describe.skipIf(!url)('EventStoreDB / KurrentDB adapter', () => {
  eventStoreContract('EventStoreDB', async () => {
    const store = createEventStoreDbEventStore(connectEventStoreDb(url ?? ''));
    return { store, teardown: () => store.close() };
  });
});
