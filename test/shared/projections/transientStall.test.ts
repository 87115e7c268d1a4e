import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql } from '../../../shared/db/pool.ts';
import { START } from '../../../shared/event-store/port.ts';
import { defineProjection } from '../../../shared/projections/projection.ts';
import { runProjection } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { sqlStateOf } from '../../../shared/db/sqlState.ts';
import { listParkedEvents } from '../../../shared/projections/parking.ts';
import { useTestEventStore } from '../../support/database.ts';

/**
 * Regression: a transient failure (55P03 lock_not_available) raised inside a handler
 * stalled the projector until another event was appended: leaving the follow loop waited for
 * the read-ahead's long poll before it could retry.
 */
describe('when a handler fails transiently (55P03) on one event', () => {
  const fixture = useTestEventStore();

  it('retries it and applies it within ~1 s of the failure clearing, with no new event appended, and parks nothing', async () => {
    const { db, store } = fixture;
    const state = { failuresLeft: 0, clearedAt: 0 };
    const locky = defineProjection({
      name: 'locky',
      version: 1,
      eventTypes: ['Noted'],
      tables: { locky_notes: (table) => [sql.fragment`create table ${table} (event_id text primary key)`] },
      async handle(tx, events, { locky_notes }) {
        for (const event of events) {
          if (state.failuresLeft > 0) {
            state.failuresLeft--;
            if (state.failuresLeft === 0) state.clearedAt = performance.now();
            // What a `select … for update nowait` on a locked row raises.
            await tx.query(sql.type(z.object({}))`
              do $$ begin raise exception 'could not obtain lock on row' using errcode = '55P03'; end $$
            `);
          }
          await tx.query(sql.type(z.object({}))`insert into ${locky_notes} (event_id) values (${event.id})`);
        }
      },
    });
    const errors: unknown[] = [];
    // A long poll interval: a stall would show as seconds, not a poll's worth of latency.
    const projector = runProjection(db.pool, store, locky, { pollIntervalMs: 5_000, onError: (error) => errors.push(error) });
    try {
      expect(await waitForCheckpoint(db.pool, locky.name, START, 20_000)).toBe(true);
      state.failuresLeft = 3;
      const event = { id: randomUUID(), type: 'Noted', data: {}, metadata: { tenantId: 't' } };
      const { position } = await store.append('locky-1', [event]);
      expect(await waitForCheckpoint(db.pool, locky.name, position, 10_000)).toBe(true);
      const afterClearing = performance.now() - state.clearedAt;
      console.info(`[transient stall] applied ${afterClearing.toFixed(0)} ms after the last 55P03`);
      expect(state.failuresLeft).toBe(0);
      expect(afterClearing).toBeLessThan(1_000);
      // onError saw each transient failure; the event is applied once, nothing is parked.
      expect(errors.map(sqlStateOf)).toEqual(['55P03', '55P03', '55P03']);
      expect(await db.pool.anyFirst(sql.type(z.object({ event_id: z.string() }))`select event_id from locky_notes`)).toEqual([event.id]);
      expect(await listParkedEvents(db.pool, locky.name)).toEqual([]);
    } finally {
      await projector.stop();
    }
  }, 30_000);
});
