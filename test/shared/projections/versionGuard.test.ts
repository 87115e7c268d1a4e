import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createDatabasePool } from '../../../shared/db/pool.ts';
import { replayLockKey } from '../../../shared/projections/parking.ts';
import { START } from '../../../shared/event-store/port.ts';
import { ProjectionSupersededError } from '../../../shared/projections/versionGuard.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import { runProjection } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { sqlAt, useTestEventStore } from '../../support/database.ts';
import { staysTrue } from '../../support/staysTrue.ts';
import { waitFor } from '../../support/waitFor.ts';
import { allEvents, expectedTally, readTally, tallied, tallyProjection } from '../../support/projections/tallyProjection.ts';

/**
 * During a rolling deploy that bumps a projection's version, old and new projectors
 * each rebuilt the model and swapped it back and forth. The old one must stop instead.
 */
describe('version guard', () => {
  describe('when the stored model was built by a newer version', () => {
    const fixture = useTestEventStore();

    it('an older projector stops instead of rebuilding the model back', async () => {
      const { db, store } = fixture;
      for (let i = 0; i < 20; i++) await store.append(`guard-${i % 4}`, [tallied()]);
      const v2 = runProjection(db.pool, store, tallyProjection(2, 10), { pollIntervalMs: 50 });
      try {
        expect(await waitForCheckpoint(db.pool, 'tally', await store.headPosition(), 20_000)).toBe(true);
        expect((await readCheckpoint(db.pool, 'tally'))?.version).toBe(2);

        const errors: unknown[] = [];
        const v1 = runProjection(db.pool, store, tallyProjection(1, 1), { pollIntervalMs: 50, onError: (e) => errors.push(e) });
        expect(await v1.done).toBe('superseded');
        expect(errors).toEqual([expect.any(ProjectionSupersededError)]);
        expect(String(errors[0])).toMatch(/built at version 2, newer than this code's version 1/);

        // The v2 model is untouched and v2 keeps following.
        await store.append('guard-0', [tallied()]);
        expect(await waitForCheckpoint(db.pool, 'tally', await store.headPosition(), 20_000)).toBe(true);
        expect((await readCheckpoint(db.pool, 'tally'))?.version).toBe(2);
        expect(await readTally(db.pool)).toEqual(expectedTally(await allEvents(store), 10));
      } finally {
        await v2.stop();
      }
    });

    it('refuses an explicit replay with older code unless the operator allows the downgrade', async () => {
      const { db, store } = fixture;
      await expect(replayProjection(db.pool, store, tallyProjection(1, 1))).rejects.toBeInstanceOf(ProjectionSupersededError);
      expect((await readCheckpoint(db.pool, 'tally'))?.version).toBe(2);
      await replayProjection(db.pool, store, tallyProjection(1, 1), { allowDowngrade: true });
      expect((await readCheckpoint(db.pool, 'tally'))?.version).toBe(1);
      expect(await readTally(db.pool)).toEqual(expectedTally(await allEvents(store), 1));
    });
  });

  describe('when projectors of versions 1 and 2 run at the same time', () => {
    const fixture = useTestEventStore();

    it('the model goes from version 1 to 2 once and never back, while writes continue', async () => {
      const { db, store } = fixture;
      for (let i = 0; i < 50; i++) await store.append(`both-${i % 5}`, [tallied()]);
      const v1 = runProjection(db.pool, store, tallyProjection(1, 1), { pollIntervalMs: 20, batchSize: 50 });
      expect(await waitForCheckpoint(db.pool, 'tally', START, 20_000)).toBe(true);

      const versions: number[] = [];
      let watching = true;
      const watcher = (async () => {
        while (watching) {
          const version = (await readCheckpoint(db.pool, 'tally'))?.version;
          if (version !== undefined && versions.at(-1) !== version) versions.push(version);
          await new Promise((r) => setTimeout(r, 5)); // the sampling rate: a flip back would show up
        }
      })();
      let writing = true;
      const writer = (async () => {
        for (let i = 0; writing && i < 300; i++) {
          await store.append(`both-${i % 5}`, [tallied()]);
          await new Promise((r) => setTimeout(r, 5)); // the writers' pace: writes continue during the switch
        }
      })();

      const v2 = runProjection(db.pool, store, tallyProjection(2, 10), { pollIntervalMs: 20, batchSize: 50 });
      try {
        expect(await v1.done).toBe('superseded');
        writing = false;
        await writer;
        expect(await waitForCheckpoint(db.pool, 'tally', await store.headPosition(), 20_000)).toBe(true);
      } finally {
        writing = false;
        watching = false;
        await watcher;
        await v2.stop();
        await v1.stop();
      }
      expect(versions).toEqual([1, 2]);
      expect(await readTally(db.pool)).toEqual(expectedTally(await allEvents(store), 10));
    }, 90_000);
  });

  describe('when several projectors of the new version start together (a version bump on every copy)', () => {
    const fixture = useTestEventStore();

    it('one rebuilds the model; the others find it built under the replay lock instead of rebuilding it in turn', async () => {
      const { db, store } = fixture;
      for (let i = 0; i < 400; i++) await store.append(`copies-${i % 8}`, [tallied()]);
      await replayProjection(db.pool, store, tallyProjection(1, 1));
      const tableOid = async () => (await sqlAt<{ oid: string }>(db.url, "select 'tally'::regclass::oid::text as oid"))[0]?.oid;
      const v1Table = await tableOid();

      const copies = [1, 2, 3].map(() => runProjection(db.pool, store, tallyProjection(2, 10), { pollIntervalMs: 20, batchSize: 50 }));
      try {
        await waitFor(async () => ((await readCheckpoint(db.pool, 'tally'))?.version === 2 ? true : undefined));
        const v2Table = await tableOid();
        expect(v2Table).not.toBe(v1Table);
        await store.append('copies-0', [tallied()]);
        // Every copy is past its start-up (it follows the log) once the new event is applied and a
        // few polls have gone by; a second build would swap in another table within that second.
        expect(await waitForCheckpoint(db.pool, 'tally', await store.headPosition(), 20_000)).toBe(true);
        expect(await staysTrue(async () => (await tableOid()) === v2Table, 1_000)).toBe(true);
        expect(await readTally(db.pool)).toEqual(expectedTally(await allEvents(store), 10));
      } finally {
        await Promise.all(copies.map((c) => c.stop()));
      }
    });

    it('a copy waits for another build longer than the pool statement timeout (the replay lock is polled)', async () => {
      const { db, store } = fixture;
      const building = new pg.Client({ connectionString: db.url });
      await building.connect();
      const pool = await createDatabasePool(db.url, { statementTimeoutMs: 300 });
      try {
        await building.query('select pg_advisory_lock(hashtext($1))', [replayLockKey('tally')]);
        const waiting = replayProjection(pool, store, tallyProjection(3, 1));
        // The other build holds the lock for 1 s, longer than the 300 ms statement timeout: the input.
        await new Promise((r) => setTimeout(r, 1_000));
        await building.query('select pg_advisory_unlock(hashtext($1))', [replayLockKey('tally')]);
        expect((await waiting).processed).toBeGreaterThan(0);
        expect((await readCheckpoint(db.pool, 'tally'))?.version).toBe(3);
      } finally {
        await pool.end();
        await building.end();
      }
    });
  });
});
