import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createDatabasePool, sql } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { comparePositions, type EventStore } from '../../../shared/event-store/port.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { runProjection } from '../../../shared/projections/follow.ts';
import { listParkedEvents, retryParkedEvents } from '../../../shared/projections/parking.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import type { Projection } from '../../../shared/projections/projection.ts';
import { changesProjection } from '../../../projections/changes/changesProjection.ts';
import { employeesProjection } from '../../../projections/employees/employeesProjection.ts';
import { createTestDatabase, sqlAt, type TestDatabase } from '../../support/database.ts';
import { provisionTenant } from '../../support/auth.ts';
import { hire, logPositionsOf } from '../../support/harness/changes.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * Regression: the change feed's pages committed with `synchronous_commit = off`, so PostgreSQL
 * showed a page to readers before it was on disk; after a database crash a cursor a client had
 * been given named a change the table no longer held, and the feed answered 400 "unknown cursor"
 * until the projector applied the page again. The crash cannot be staged on the shared server:
 * the test looks, inside each page's own transaction, at the commit mode the page will commit
 * with (PostgreSQL makes a synchronous commit visible only after its WAL flush).
 */
let db: TestDatabase;
let store: EventStore;

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool, { listenUrl: db.url });
});
afterAll(async () => {
  await store?.close();
  await db?.drop();
});

/**
 * `projection` as it is, whose handler first records the transaction's `synchronous_commit`, and
 * refuses (a deterministic failure) the events `refuse` names.
 */
function observed<T extends string>(projection: Projection<T>, refuse: (streamId: string) => boolean = () => false) {
  const modes: string[] = [];
  const watched: Projection<T> = {
    ...projection,
    async handle(tx, events, tables) {
      modes.push(await tx.oneFirst(sql.type(z.object({ mode: z.string() }))`select current_setting('synchronous_commit') as mode`));
      if (events.some((e) => refuse(e.streamId))) throw new Error('refused by the test');
      await projection.handle(tx, events, tables);
    },
  };
  return { watched, modes };
}

/** Runs the projection live over a few pages of hires and renames; the commit modes its pages had. */
async function pageModes<T extends string>(projection: Projection<T>): Promise<string[]> {
  const { watched, modes } = observed(projection);
  const projector = runProjection(db.pool, store, watched, { pollIntervalMs: 50, batchSize: 3 });
  try {
    await waitFor(() => readCheckpoint(db.pool, projection.name));
    const tenant = await provisionTenant(db.pool);
    for (let i = 0; i < 3; i++) {
      const employee = await hire(store, tenant.tenantId, `durable-${i}`);
      await employee.rename(`durable-${i}-renamed`);
    }
    const last = (await logPositionsOf(store, tenant.tenantId)).at(-1);
    if (!last) throw new Error('nothing was written');
    await waitFor(async () => {
      const checkpoint = await readCheckpoint(db.pool, projection.name);
      return checkpoint && comparePositions(checkpoint.position, last) >= 0 && modes.length >= 2;
    });
    return modes;
  } finally {
    await projector.stop();
  }
}

describe('the commit of a projection page', () => {
  it('is synchronous for the change feed: no reader sees a change, nor its cursor, before it is on disk', async () => {
    const modes = await pageModes(changesProjection);
    expect(modes.length).toBeGreaterThanOrEqual(2);
    expect(new Set(modes)).toEqual(new Set(['on']));
  });

  it('stays asynchronous for a model read by value (employees), which a crash only sets back', async () => {
    const modes = await pageModes(employeesProjection);
    expect(modes.length).toBeGreaterThanOrEqual(2);
    expect(new Set(modes)).toEqual(new Set(['off']));
  });

  it("is synchronous for an operator's retry of a parked change of the feed, too", async () => {
    const tenant = await provisionTenant(db.pool);
    let failing = true;
    const { watched, modes } = observed(changesProjection, (streamId) => failing && streamId.includes(tenant.tenantId));
    const projector = runProjection(db.pool, store, watched, { pollIntervalMs: 50, isolation: { maxAttempts: 1 } });
    try {
      await waitFor(() => readCheckpoint(db.pool, changesProjection.name));
      await hire(store, tenant.tenantId, 'parked');
      await waitFor(async () => (await listParkedEvents(db.pool, changesProjection.name)).length > 0);
    } finally {
      await projector.stop();
    }
    failing = false;
    modes.length = 0;
    // A database whose default is asynchronous (a deployment's choice) must not make it so.
    await sqlAt(db.url, `alter database "${db.name}" set synchronous_commit = off`);
    const operator = await createDatabasePool(db.url, { maximumPoolSize: 1 });
    try {
      expect(await operator.oneFirst(sql.type(z.object({ mode: z.string() }))`select current_setting('synchronous_commit') as mode`)).toBe(
        'off',
      );
      const retried = await retryParkedEvents(operator, watched, { employee_changes: sql.identifier(['employee_changes']) });
      expect(retried).toEqual({ retried: 1, stillParked: 0 });
      expect(modes).toEqual(['on']);
    } finally {
      await operator.end();
    }
  });

  it('is synchronous for the swap of a replay of the feed, whatever the database default', async () => {
    const tenant = await provisionTenant(db.pool);
    await hire(store, tenant.tenantId, 'replayed');
    await sqlAt(db.url, `alter database "${db.name}" set synchronous_commit = off`);
    // What each write of the feed's checkpoint row commits with: the swap is the one that moves it
    // to the replay's end (a trigger sees the transaction's setting as it will commit).
    await sqlAt(
      db.url,
      `create table checkpoint_commit_modes (at serial primary key, mode text not null);
       create function record_checkpoint_commit_mode() returns trigger language plpgsql as $f$
       begin
         insert into checkpoint_commit_modes (mode) values (current_setting('synchronous_commit'));
         return new;
       end $f$;
       create trigger record_checkpoint_commit_mode after insert or update on projection_checkpoints
         for each row when (new.name = '${changesProjection.name}') execute function record_checkpoint_commit_mode();`,
    );
    const operator = await createDatabasePool(db.url, { maximumPoolSize: 4 });
    try {
      expect(await operator.oneFirst(sql.type(z.object({ mode: z.string() }))`select current_setting('synchronous_commit') as mode`)).toBe(
        'off',
      );
      await replayProjection(operator, store, changesProjection);
      const modes = await sqlAt<{ mode: string }>(db.url, 'select mode from checkpoint_commit_modes order by at');
      expect(modes.at(-1)?.mode).toBe('on');
    } finally {
      await operator.end();
      await sqlAt(db.url, 'drop trigger record_checkpoint_commit_mode on projection_checkpoints');
    }
  });
});
