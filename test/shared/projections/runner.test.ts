import { spawn, type ChildProcess } from 'node:child_process';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import { runProjection } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { createTestDatabase, useTestEventStore, type TestDatabase } from '../../support/database.ts';
import { allEvents, expectedTally, readTally, tallied, tallyProjection } from '../../support/projections/tallyProjection.ts';

async function appendMany(store: EventStore, streams: number, perStream: number, prefix: string) {
  for (let r = 0; r < perStream; r++) {
    await Promise.all(Array.from({ length: streams }, (_, s) => store.append(`${prefix}-${s}`, [tallied()])));
  }
}

/** Connections of the tally projection's page pipeline, as PostgreSQL sees them. */
const pipelineConnections = (db: TestDatabase) =>
  db.pool.oneFirst(sql.type(z.object({ n: z.number() }))`
    select count(*)::int as n from pg_stat_activity where application_name = 'employee-analytics-projector-tally' and datname = current_database()
  `);

describe('projection runner', () => {
  const fixture = useTestEventStore();

  describe('when events exist before the projection starts', () => {
    it('builds the model, commits the checkpoint with it, and follows live events', async () => {
      const { db, store } = fixture;
      await appendMany(store, 5, 4, 'build');
      const handle = runProjection(db.pool, store, tallyProjection(), { batchSize: 7, pollIntervalMs: 20 });
      try {
        expect(await waitForCheckpoint(db.pool, 'tally', await store.headPosition(), 10_000)).toBe(true);
        await appendMany(store, 2, 3, 'live');
        expect(await waitForCheckpoint(db.pool, 'tally', await store.headPosition(), 10_000)).toBe(true);
        // live pages ran on the projection's pipelined connection (pagePipeline.ts)
        expect(await pipelineConnections(db)).toBe(1);
      } finally {
        await handle.stop();
      }
      expect(await pipelineConnections(db)).toBe(0);
      expect(await readTally(db.pool)).toEqual(expectedTally(await allEvents(store)));
      const checkpoint = await readCheckpoint(db.pool, 'tally');
      expect(checkpoint?.eventsApplied).toBe(26);
    });
  });

  describe('when the version changes', () => {
    it('rebuilds the model from the first event with the new meaning', async () => {
      const { db, store } = fixture;
      const v2 = tallyProjection(2, 10);
      const handle = runProjection(db.pool, store, v2, { pollIntervalMs: 20 });
      try {
        await expect.poll(async () => (await readCheckpoint(db.pool, 'tally'))?.version, { timeout: 10_000 }).toBe(2);
        expect(await waitForCheckpoint(db.pool, 'tally', await store.headPosition(), 10_000)).toBe(true);
      } finally {
        await handle.stop();
      }
      expect(await readTally(db.pool)).toEqual(expectedTally(await allEvents(store), 10));
    });
  });

  describe('when replaying while readers read', () => {
    it('readers only ever see a complete model, and the swap equals a fresh fold', async () => {
      const { db, store } = fixture;
      await appendMany(store, 20, 25, 'replay');
      const v2 = tallyProjection(2, 10);
      await replayProjection(db.pool, store, v2);
      const total = (await allEvents(store)).length * 10;
      let reading = true;
      const observations: number[] = [];
      const reader = (async () => {
        while (reading) {
          const rows = await readTally(db.pool);
          observations.push(rows.reduce((sum, r) => sum + r.events, 0));
        }
      })();
      const progress: number[] = [];
      await replayProjection(db.pool, store, v2, { batchSize: 50, onProgress: (p) => progress.push(p.processed) });
      reading = false;
      await reader;
      expect(observations.length).toBeGreaterThan(0);
      expect(new Set(observations)).toEqual(new Set([total]));
      expect(progress.at(-1)).toBe(total / 10);
      expect(await readTally(db.pool)).toEqual(expectedTally(await allEvents(store), 10));
    });
  });
});

describe('when the projector process is killed at random points', () => {
  let db: TestDatabase;
  let store: EventStore;
  const fixture = resolve(import.meta.dirname, '../../support/projections/projectorProcess.ts');
  const children = new Set<ChildProcess>();

  beforeAll(async () => {
    db = await createTestDatabase();
    store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  });
  afterAll(async () => {
    for (const child of children) child.kill('SIGKILL');
    await store.close();
    await db.drop();
  });

  // Plain `node` (no npm or loader wrapper): SIGKILL must hit the projector itself, not a
  // wrapper that would leave its child running.
  const startProjector = () =>
    new Promise<ChildProcess>((resolveStarted, reject) => {
      const child = spawn(process.execPath, [fixture], {
        env: { ...process.env, DATABASE_URL: db.url, BATCH_SIZE: '25' },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      children.add(child);
      child.once('exit', () => children.delete(child));
      child.once('error', reject);
      child.stdout?.on('data', (chunk: Buffer) => {
        if (chunk.toString().includes('started')) resolveStarted(child);
      });
    });

  const kill = (child: ChildProcess) =>
    new Promise<void>((resolveKilled) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolveKilled();
      child.once('exit', () => resolveKilled());
      child.kill('SIGKILL');
    });

  it('restarts exactly where it committed: the model equals a fresh replay', async () => {
    const KILLS = 10;
    // The writer keeps a steady trickle going for the whole kill loop, so every projector
    // incarnation has batches to commit (and to be killed in the middle of).
    let writing = true;
    let written = 0;
    let writer: Promise<void> | undefined;
    const startWriter = () =>
      (async () => {
        while (writing && written < 20_000) {
          await Promise.all(Array.from({ length: 10 }, (_, s) => store.append(`kill-${s}`, [tallied()])));
          written += 10;
          await new Promise((r) => setTimeout(r, 10)); // the trickle's pace: the input, not a wait
        }
      })();
    const killedAtBatches: number[] = [];
    for (let k = 0; k < KILLS; k++) {
      const child = await startProjector();
      writer ??= startWriter();
      let batches = 0;
      let onBatch = () => undefined as void;
      child.stdout?.on('data', (chunk: Buffer) => {
        if (process.env.DEBUG_KILL_TEST) process.stderr.write(`[child ${k}] ${chunk.toString()}`);
        batches += chunk.toString().split('batch ').length - 1;
        onBatch();
      });
      // The first kill lands anywhere (usually inside the initial build); the others after a
      // random number of committed batches plus a random few milliseconds, i.e. mid-batch.
      const target = k === 0 ? 0 : 1 + Math.floor(Math.random() * 4);
      await new Promise<void>((r) => {
        const deadline = setTimeout(r, 30_000); // no batch for 30 s: kill it anyway
        onBatch = () => {
          if (batches >= target) {
            clearTimeout(deadline);
            r();
          }
        };
        if (k === 0) setTimeout(r, Math.random() * 300); // the first kill's random moment
      });
      await new Promise((r) => setTimeout(r, Math.random() * 15)); // into the next batch: the kill lands mid-batch
      killedAtBatches.push(batches);
      await kill(child);
    }
    writing = false;
    await writer;
    const finalRun = await startProjector();
    try {
      expect(await waitForCheckpoint(db.pool, 'tally', await store.headPosition(), 60_000)).toBe(true);
    } finally {
      finalRun.kill('SIGTERM');
      await new Promise((r) => finalRun.once('exit', r));
    }
    const events = await allEvents(store);
    const live = await readTally(db.pool);
    expect(live).toEqual(expectedTally(events));
    // And a from-scratch replay (shadow build + swap) produces the very same rows.
    await replayProjection(db.pool, store, tallyProjection());
    expect(await readTally(db.pool)).toEqual(live);
    // Every incarnation after the first was killed after committing at least one batch.
    expect(
      killedAtBatches.slice(1).every((b) => b > 0),
      killedAtBatches.join('/'),
    ).toBe(true);
    console.info(`[kill test] ${events.length} events, ${KILLS} SIGKILLs after ${killedAtBatches.join('/')} batches`);
  }, 180_000);
});
