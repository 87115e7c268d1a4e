import { z } from 'zod';
import { describe, expect, it, vi } from 'vitest';
import { sql } from '../../../shared/db/pool.ts';
import { checkpointListenerFor } from '../../../shared/projections/checkpointNotifications.ts';
import { runProjection } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { START, type GlobalPosition } from '../../../shared/event-store/port.ts';
import { useTestEventStore } from '../../support/database.ts';
import { tallied, tallyProjection } from '../../support/projections/tallyProjection.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * Read-your-writes waits on checkpoint NOTIFYs (one LISTEN connection per process), not by
 * polling the checkpoint table every 10 ms per waiting request.
 */
describe('read-your-writes (waitForCheckpoint)', () => {
  const fixture = useTestEventStore();

  it('wakes on the checkpoint commit: many waiters, no polling (fallback poll set to a minute)', async () => {
    const { db, store } = fixture;
    // Build, then stop: the writes below are made while no projector runs, so every waiter
    // starts behind and can only be woken by the checkpoint commit of the projector started later.
    const builder = runProjection(db.pool, store, tallyProjection(), { pollIntervalMs: 1_000 });
    expect(await waitForCheckpoint(db.pool, 'tally', START, 20_000)).toBe(true);
    await builder.stop();
    const positions: GlobalPosition[] = [];
    for (let i = 0; i < 5; i++) positions.push((await store.append(`ryw-${i}`, [tallied()])).position);
    // A waiter registers with the process's LISTEN connection before it reads the checkpoint:
    // once all 50 have, a commit's notification wakes each of them.
    const watch = vi.spyOn(checkpointListenerFor(db.pool), 'watch');
    const waits = Array.from({ length: 50 }, (_, i) =>
      waitForCheckpoint(db.pool, 'tally', positions[i % positions.length] ?? START, 10_000, 60_000),
    );
    await waitFor(() => watch.mock.calls.length === 50, 10_000, 'all 50 waiters listening');
    watch.mockRestore();
    const started = performance.now();
    const projector = runProjection(db.pool, store, tallyProjection(), { pollIntervalMs: 1_000 });
    try {
      expect((await Promise.all(waits)).every(Boolean)).toBe(true);
      // Woken by the notification: far sooner than the 60 s fallback poll (or the 10 s timeout).
      expect(performance.now() - started).toBeLessThan(5_000);
    } finally {
      await projector.stop();
    }
  });

  it('gives up at its timeout when the position is never reached', async () => {
    const { db } = fixture;
    const started = performance.now();
    expect(await waitForCheckpoint(db.pool, 'tally', { commit: 2n ** 62n, prepare: 0n }, 300)).toBe(false);
    expect(performance.now() - started).toBeGreaterThanOrEqual(290);
  });

  it('sees a checkpoint written by any writer (a replay swap, another process) through the trigger', async () => {
    const { db } = fixture;
    const target = { commit: 2n ** 61n, prepare: 7n };
    const watch = vi.spyOn(checkpointListenerFor(db.pool), 'watch');
    const waiting = waitForCheckpoint(db.pool, 'manual', target, 5_000, 60_000);
    await waitFor(() => watch.mock.calls.length === 1, 5_000, 'the waiter listening');
    watch.mockRestore();
    await db.pool.query(sql.type(z.object({}))`
      insert into projection_checkpoints (name, version, commit_position, prepare_position)
      values ('manual', 1, ${target.commit.toString()}, ${target.prepare.toString()})
    `);
    expect(await waiting).toBe(true);
  });
});
