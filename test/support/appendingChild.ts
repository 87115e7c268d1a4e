/**
 * A writer process for the kill -9 test: WORKERS concurrent loops, each appending "creates"
 * (a reservation stream and an employee stream, both new, in one appendMany) through the
 * PostgreSQL adapter's group commit, printing `ack <n>` once each is acknowledged. The parent
 * kills it with SIGKILL mid-flush.
 *
 *   DATABASE_URL=… RUN_ID=… node test/support/appendingChild.ts
 */
import { randomUUID } from 'node:crypto';
import { createDatabasePool } from '../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../shared/event-store/postgres/eventStore.ts';

const url = process.env.DATABASE_URL;
const runId = process.env.RUN_ID;
if (!url || !runId) throw new Error('DATABASE_URL and RUN_ID are required');
const pool = await createDatabasePool(url, { maximumPoolSize: 4 });
const store = createPostgresEventStore(pool);
let next = 0;
const worker = async () => {
  for (;;) {
    const n = next++;
    await store.appendMany([
      {
        streamId: `${runId}-reservation-${n}`,
        events: [{ id: randomUUID(), type: 'Reserved', data: { n } }],
        expectedRevision: 'no_stream',
      },
      { streamId: `${runId}-employee-${n}`, events: [{ id: randomUUID(), type: 'Hired', data: { n } }], expectedRevision: 'no_stream' },
    ]);
    process.stdout.write(`ack ${n}\n`);
  }
};
await Promise.all(Array.from({ length: Number(process.env.WORKERS ?? 16) }, worker));
