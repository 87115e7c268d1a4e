import { FORWARDS, StreamNotFoundError } from '@kurrent/kurrentdb-client';
import { describe } from 'vitest';
import { connectEventStoreDb, createEventStoreDbEventStore } from '../../../../shared/event-store/eventstoredb/eventStore.ts';
import { createTestDatabase } from '../../../support/database.ts';
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
    const client = connectEventStoreDb(url ?? '');
    const store = createEventStoreDbEventStore(client);
    // The data keys live in PostgreSQL whichever store holds the events.
    const db = await createTestDatabase();
    return {
      store,
      sealing: {
        keysPool: db.pool,
        // Straight from the client, as the server holds the events.
        async storedData(streamId) {
          const data: unknown[] = [];
          try {
            for await (const resolved of client.readStream(streamId, { direction: FORWARDS })) data.push(resolved.event?.data);
          } catch (error) {
            if (!(error instanceof StreamNotFoundError)) throw error;
          }
          return data;
        },
        // Every field of each recorded event: binary data and metadata decoded, revisions and positions (bigint) as text.
        async storedText(streamId) {
          const lines: string[] = [];
          // The holder's own value, before `toJSON` (a Buffer's would hide its bytes as numbers).
          const asText = function (this: Record<string, unknown>, key: string, value: unknown) {
            const own = this[key];
            if (own instanceof Uint8Array) return Buffer.from(own).toString('utf8');
            return typeof own === 'bigint' ? own.toString() : value;
          };
          try {
            for await (const resolved of client.readStream(streamId, { direction: FORWARDS }))
              lines.push(JSON.stringify(resolved.event, asText));
          } catch (error) {
            if (!(error instanceof StreamNotFoundError)) throw error;
          }
          return lines.join('\n');
        },
      },
      async teardown() {
        await store.close();
        await db.drop();
      },
    };
  });
});
