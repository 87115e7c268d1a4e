import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ignoredRows, sql } from '../../../shared/db/pool.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { runProjection } from '../../../shared/projections/follow.ts';
import { replayLockKey } from '../../../shared/projections/parking.ts';
import { useTestEventStore } from '../../support/database.ts';
import { tallied, tallyProjection } from '../../support/projections/tallyProjection.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * A replay killed mid-build leaves its shadow tables: copies of the read model that nothing reads
 * and no erasure reaches. A projector that starts on a current model drops them, unless a replay
 * holds the projection's lock (its tables are its work), and never waits on them.
 */
const t = useTestEventStore();

const leftTables = () =>
  t.db.pool.anyFirst(sql.type(z.object({ name: z.string() }))`
    select tablename as name from pg_tables
    where schemaname = current_schema() and tablename in ('tally__g97', 'tally__g98')
    order by tablename
  `);

async function leaveBuildBehind(): Promise<void> {
  await t.db.pool.query(sql.type(ignoredRows)`create table tally__g97 (stream_id text primary key, secret text)`);
  await t.db.pool.query(sql.type(ignoredRows)`create table tally__g98 (stream_id text primary key, secret text)`);
}

/** Runs the projector until it has applied a fresh event (past its start-up), then stops it. */
async function startAndFollow(): Promise<void> {
  const { nextRevision } = await t.store.append(`tally-${Date.now()}`, [tallied()]);
  expect(nextRevision).toBe(0);
  const head = await t.store.headPosition();
  const projector = runProjection(t.db.pool, t.store, tallyProjection(), { pollIntervalMs: 20 });
  try {
    await waitFor(async () => {
      const at = await readCheckpoint(t.db.pool, 'tally');
      return at !== null && at.position.commit >= head.commit ? true : undefined;
    });
  } finally {
    await projector.stop();
  }
}

describe('when a killed replay left its tables behind', () => {
  it('a projector starting on a current model drops them', async () => {
    await startAndFollow();
    await leaveBuildBehind();
    expect(await leftTables()).toHaveLength(2);
    await startAndFollow();
    expect(await leftTables()).toEqual([]);
  });

  it('but not while a replay of the projection holds its lock', async () => {
    await startAndFollow();
    await leaveBuildBehind();
    await t.db.pool.connect(async (replaying) => {
      await replaying.query(sql.type(ignoredRows)`select pg_advisory_lock(hashtext(${replayLockKey('tally')}))`);
      try {
        await startAndFollow();
        expect(await leftTables()).toHaveLength(2);
      } finally {
        await replaying.query(sql.type(ignoredRows)`select pg_advisory_unlock(hashtext(${replayLockKey('tally')}))`);
      }
    });
  });

  it('and a table someone reads (a dump running) is left for the next start, not waited for', async () => {
    await startAndFollow();
    await t.db.pool.query(sql.type(ignoredRows)`drop table if exists tally__g97, tally__g98`);
    await leaveBuildBehind();
    await t.db.pool.connect(async (reading) => {
      await reading.query(sql.type(ignoredRows)`begin`);
      try {
        await reading.query(sql.type(ignoredRows)`lock table tally__g97 in access share mode`);
        await startAndFollow();
        expect(await leftTables()).toHaveLength(2);
      } finally {
        await reading.query(sql.type(ignoredRows)`rollback`);
      }
    });
    await startAndFollow();
    expect(await leftTables()).toEqual([]);
  });
});
