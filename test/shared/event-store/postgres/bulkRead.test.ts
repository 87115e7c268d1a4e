import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { useTestEventStore } from '../../../support/database.ts';
import { START, comparePositions, type EventStore, type RecordedEvent } from '../../../../shared/event-store/port.ts';

/** `readAllBulk` of the PostgreSQL adapter: the same events as paging `readAll`, up to the head as of its start. */
const ctx = useTestEventStore();

async function pagedReadAll(store: EventStore, eventTypes: readonly string[]): Promise<RecordedEvent[]> {
  const events: RecordedEvent[] = [];
  let after = START;
  for (;;) {
    const page = await store.readAll({ after, eventTypes, maxCount: 50 });
    events.push(...page.events);
    if (comparePositions(page.checkpoint, after) === 0) return events;
    after = page.checkpoint;
  }
}

async function collect(iterable: AsyncIterable<{ events: RecordedEvent[] }>, between?: () => Promise<void>): Promise<RecordedEvent[]> {
  const events: RecordedEvent[] = [];
  for await (const page of iterable) {
    events.push(...page.events);
    await between?.();
  }
  return events;
}

describe('when the log is read in bulk', () => {
  it('returns exactly what paging readAll returns, in global order, across many small pages', async () => {
    const { store } = ctx;
    // Over a hundred positions, so text order would differ from numeric order ('10' < '9').
    for (let s = 0; s < 30; s++) {
      await store.append(`bulk-${s}-${randomUUID()}`, [
        { id: randomUUID(), type: 'A', data: { s, n: 0 } },
        { id: randomUUID(), type: 'B', data: { s, n: 1 } },
        { id: randomUUID(), type: 'A', data: { s, n: 2, text: 'tab\there "quoted" \\ back' } },
        { id: randomUUID(), type: 'A', data: { s, n: 3 }, metadata: { actor: 'x' } },
      ]);
    }
    const bulkRead = store.readAllBulk?.bind(store);
    if (!bulkRead) throw new Error('the PostgreSQL adapter has a bulk read when its pool URL is known');
    const expected = await pagedReadAll(store, ['A']);
    const bulk = await collect(bulkRead({ eventTypes: ['A'], pageSize: 7 }));
    expect(bulk.length).toBe(90);
    expect(bulk).toEqual(expected);
  });

  it('stops at the head as it was when the read started', async () => {
    const { store } = ctx;
    const bulkRead = store.readAllBulk?.bind(store);
    if (!bulkRead) throw new Error('no bulk read');
    const before = (await pagedReadAll(store, ['C'])).length;
    await store.append(
      `bulk-c-${randomUUID()}`,
      Array.from({ length: 20 }, () => ({ id: randomUUID(), type: 'C', data: {} })),
    );
    let appended = false;
    const read = await collect(bulkRead({ eventTypes: ['C'], pageSize: 5 }), async () => {
      if (appended) return;
      appended = true;
      await store.append(`bulk-c-${randomUUID()}`, [{ id: randomUUID(), type: 'C', data: { late: true } }]);
    });
    expect(read.length).toBe(before + 20);
    expect(read.some((e) => (e.data as { late?: boolean }).late)).toBe(false);
  });
});
