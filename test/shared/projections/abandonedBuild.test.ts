import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ignoredRows, sql } from '../../../shared/db/pool.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { runProjection, type RunProjectionOptions } from '../../../shared/projections/follow.ts';
import { replayLockKey } from '../../../shared/projections/parking.ts';
import { useTestEventStore } from '../../support/database.ts';
import { tallied, tallyProjection } from '../../support/projections/tallyProjection.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * A replay killed mid-build leaves its shadow tables: copies of the read model that nothing reads
 * and no erasure reaches. A projector that starts on a current model drops them, and so does one
 * already running, now and then, unless a replay holds the projection's lock (its tables are its
 * work); it never waits on them.
 */
const t = useTestEventStore();

const leftTables = () =>
  t.db.pool.anyFirst(sql.type(z.object({ name: z.string() }))`
    select tablename as name from pg_tables
    where schemaname = current_schema() and tablename in ('tally__g97', 'tally__g98')
    order by tablename
  `);

async function leaveBuildBehind(): Promise<void> {
  await t.db.pool.query(sql.type(ignoredRows)`create table if not exists tally__g97 (stream_id text primary key, secret text)`);
  await t.db.pool.query(sql.type(ignoredRows)`create table if not exists tally__g98 (stream_id text primary key, secret text)`);
}

/** Appends a fresh event; the projector has applied it (and is past its start-up) once `caughtUp()`. */
async function freshEvent(): Promise<() => Promise<true | undefined>> {
  const { nextRevision } = await t.store.append(`tally-${randomUUID()}`, [tallied()]);
  expect(nextRevision).toBe(0);
  const head = await t.store.headPosition();
  return async () => {
    const at = await readCheckpoint(t.db.pool, 'tally');
    return at !== null && at.position.commit >= head.commit ? true : undefined;
  };
}

/** Runs the projector while `during` runs (after it applied a fresh event), then stops it. */
async function whileFollowing(during: () => Promise<unknown> = async () => undefined, options: RunProjectionOptions = {}): Promise<void> {
  const caughtUp = await freshEvent();
  const projector = runProjection(t.db.pool, t.store, tallyProjection(), { pollIntervalMs: 20, ...options });
  try {
    await waitFor(caughtUp);
    await during();
  } finally {
    await projector.stop();
  }
}

type Connection = Parameters<Parameters<typeof t.db.pool.connect>[0]>[0];
/** What keeps a killed build's tables from being dropped, taken on a connection of its own, and how it is let go. */
type Hold = { take(c: Connection): Promise<unknown>; release(c: Connection): Promise<unknown> };

const replayLock: Hold = {
  take: (c) => c.query(sql.type(ignoredRows)`select pg_advisory_lock(hashtext(${replayLockKey('tally')}))`),
  release: (c) => c.query(sql.type(ignoredRows)`select pg_advisory_unlock(hashtext(${replayLockKey('tally')}))`),
};

const aReader: Hold = {
  take: async (c) => {
    await c.query(sql.type(ignoredRows)`begin`);
    await c.query(sql.type(ignoredRows)`lock table tally__g97 in access share mode`);
  },
  release: (c) => c.query(sql.type(ignoredRows)`rollback`),
};

/** Runs `during` while `hold` is taken; it may let go itself (`release`), else it is let go after. */
async function holding(hold: Hold, during: (release: () => Promise<void>) => Promise<void>): Promise<void> {
  await t.db.pool.connect(async (c) => {
    let held = true;
    const release = async () => {
      if (held) await hold.release(c);
      held = false;
    };
    await hold.take(c);
    try {
      await during(release);
    } finally {
      await release();
    }
  });
}

const allDropped = async () => ((await leftTables()).length === 0 ? true : undefined);

/** Tables left behind while the projector runs, and dropped by it. */
async function leftAndDropped(): Promise<void> {
  await leaveBuildBehind();
  await waitFor(allDropped);
}

/** A projector that looks for a killed replay's tables every 100 ms. */
const lookingOften: RunProjectionOptions = { abandonedBuildCheckMs: 100 };

/** The projector follows the log while the tables are held, and they stay; once let go, they are dropped with no restart. */
const stayUntilReleased = (release: () => Promise<void>) =>
  whileFollowing(async () => {
    await waitFor(await freshEvent());
    expect(await leftTables()).toHaveLength(2);
    await release();
    await waitFor(allDropped);
  });

describe('when a killed replay left its tables behind', () => {
  it('a projector starting on a current model drops them', async () => {
    await whileFollowing();
    await leaveBuildBehind();
    expect(await leftTables()).toHaveLength(2);
    await whileFollowing();
    expect(await leftTables()).toEqual([]);
  });

  it('a projector already running drops them too, without a restart', async () => {
    await whileFollowing(leftAndDropped, lookingOften);
  });

  it('and so does one that built the model at its start, for a new version', async () => {
    await whileFollowing();
    await t.db.pool.query(sql.type(ignoredRows)`update projection_checkpoints set version = version - 1 where name = 'tally'`);
    await whileFollowing(async () => {
      expect((await readCheckpoint(t.db.pool, 'tally'))?.version).toBe(tallyProjection().version);
      await leftAndDropped();
    }, lookingOften);
  });

  it('but not while a replay of the projection holds its lock: they go once it lets go', async () => {
    await whileFollowing();
    await leaveBuildBehind();
    await holding(replayLock, stayUntilReleased);
  });

  it('and a table someone reads (a dump running) does not hold the projector up: it is dropped once free', async () => {
    await whileFollowing();
    await leaveBuildBehind();
    await holding(aReader, stayUntilReleased);
  });

  it('and it ends with a projector that a newer version supersedes, instead of retrying beside it', async () => {
    await whileFollowing();
    await leaveBuildBehind();
    await holding(replayLock, async () => {
      const projector = runProjection(t.db.pool, t.store, tallyProjection(), { pollIntervalMs: 20 });
      const waited = new AbortController();
      try {
        await waitFor(await freshEvent());
        // A newer version took the model over: the next page finds it and this projector stops.
        await t.db.pool.query(sql.type(ignoredRows)`update projection_checkpoints set version = version + 1 where name = 'tally'`);
        await freshEvent();
        const outcome = await Promise.race([projector.done, sleep(10_000, 'still running', { signal: waited.signal })]);
        expect(outcome).toBe('superseded');
      } finally {
        waited.abort();
        try {
          await projector.stop();
        } finally {
          await t.db.pool.query(sql.type(ignoredRows)`update projection_checkpoints set version = 1 where name = 'tally'`);
          await t.db.pool.query(sql.type(ignoredRows)`drop table if exists tally__g97, tally__g98`);
        }
      }
    });
  });
});
