import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { comparePositions, type RecordedEvent } from '../../../../shared/event-store/port.ts';
import { useTestEventStore } from '../../../support/database.ts';

/**
 * Regression for the "sequence committed out of order" gap (emmett PR #336):
 * positions are drawn at insert and become visible at commit, so a reader that pages by
 * position alone skips events whose transaction commits late.
 */
describe('when many writers commit out of order', () => {
  const fixture = useTestEventStore();

  it('a live subscriber sees every event exactly once, in global order', async () => {
    const { db, store } = fixture;
    const WRITERS = 8;
    const EVENTS_PER_WRITER = 2_000;
    const SLOW_COMMITS = 20;
    const runId = randomUUID().slice(0, 8);
    const expected = new Set<string>();

    const controller = new AbortController();
    const received: RecordedEvent[] = [];
    const total = WRITERS * EVENTS_PER_WRITER + SLOW_COMMITS;
    const subscriber = (async () => {
      for await (const page of store.subscribeToAll({ signal: controller.signal, maxCount: 1_000, pollIntervalMs: 20 })) {
        received.push(...page.events);
        if (received.length >= total) controller.abort();
      }
    })();

    const writer = async (w: number) => {
      let written = 0;
      let n = 0;
      while (written < EVENTS_PER_WRITER) {
        const size = Math.min(1 + (n % 3), EVENTS_PER_WRITER - written);
        const events = Array.from({ length: size }, () => {
          const id = randomUUID();
          expected.add(id);
          return { id, type: 'Tick', data: { w, n } };
        });
        // Several writers share streams so appends also race on revisions ('any').
        await store.append(`ordering-${runId}-${(w + n) % 5}`, events);
        written += size;
        n++;
      }
    };

    // A writer that holds its transaction open after drawing its positions: the classic gap.
    const slowWriter = async () => {
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      try {
        for (let i = 0; i < SLOW_COMMITS; i++) {
          const id = randomUUID();
          expected.add(id);
          const stream = `ordering-${runId}-slow-${i}`;
          await client.query('begin');
          await client.query('select pg_advisory_xact_lock(hashtextextended($1, 0))', [stream]);
          await client.query(`insert into es_events (stream_id, revision, event_id, type, data) values ($1, 0, $2, 'Slow', '{}')`, [
            stream,
            id,
          ]);
          await client.query('select pg_sleep(0.1)');
          await client.query(`select pg_notify('es_events', '')`);
          await client.query('commit');
        }
      } finally {
        await client.end();
      }
    };

    const started = Date.now();
    await Promise.all([...Array.from({ length: WRITERS }, (_, w) => writer(w)), slowWriter()]);
    const timeout = setTimeout(() => controller.abort(), 30_000);
    await subscriber;
    clearTimeout(timeout);
    const elapsed = Date.now() - started;

    const ids = received.map((e) => e.id);
    expect(new Set(ids).size).toBe(ids.length); // exactly once
    expect(ids.length).toBe(total);
    expect(ids.every((id) => expected.has(id))).toBe(true); // nothing skipped, nothing foreign
    for (let i = 1; i < received.length; i++) {
      expect(comparePositions(received[i - 1]!.position, received[i]!.position)).toBe(-1);
    }
    // Within each stream the revisions arrive in order, without holes.
    const lastRevision = new Map<string, number>();
    for (const e of received) {
      expect(e.revision).toBe((lastRevision.get(e.streamId) ?? -1) + 1);
      lastRevision.set(e.streamId, e.revision);
    }
    console.info(`[ordering] ${total} events from ${WRITERS + 1} writers delivered exactly once in ${elapsed} ms`);
  }, 120_000);
});
