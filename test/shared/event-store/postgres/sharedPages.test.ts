import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { EventStore, ReadAllPage, RecordedEvent } from '../../../../shared/event-store/port.ts';
import { useTestEventStore } from '../../../support/database.ts';
import { waitFor } from '../../../support/waitFor.ts';

/**
 * Live subscriptions of one store (one process) share their page reads: the
 * projections of `projector employees` ask for the same pages, and each is read once. Sharing
 * must never cost an event, reorder one, or keep a subscriber from seeing later commits.
 */
const TYPES = ['SharedA', 'SharedB'];

async function follow(store: EventStore, signal: AbortSignal, until: (seen: RecordedEvent[]) => boolean) {
  const pages: ReadAllPage[] = [];
  const seen: RecordedEvent[] = [];
  for await (const page of store.subscribeToAll({ eventTypes: TYPES, maxCount: 7, pollIntervalMs: 5_000, signal })) {
    pages.push(page);
    seen.push(...page.events);
    if (until(seen)) break;
  }
  return { pages, seen };
}

/** `count` one-event appends under a fresh run prefix, in order; the run and the event ids. */
async function appendRun(store: EventStore, count: number, streamOf: (i: number) => number, typeOf: (i: number) => string) {
  const run = randomUUID().slice(0, 8);
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const id = randomUUID();
    ids.push(id);
    await store.append(`${run}-${streamOf(i)}`, [{ id, type: typeOf(i), data: { i } }]);
  }
  return { run, ids };
}

describe('shared subscription pages (PostgreSQL adapter)', () => {
  const fixture = useTestEventStore();

  it('gives subscribers at the same position every event once, in order', async () => {
    const { store } = fixture;
    const { run, ids } = await appendRun(
      store,
      40,
      (i) => i % 5,
      (i) => (i % 2 ? 'SharedA' : 'SharedB'),
    );
    const controller = new AbortController();
    const mine = (seen: RecordedEvent[]) => seen.filter((e) => e.streamId.startsWith(run)).length >= 40;
    const [first, second] = await Promise.all([follow(store, controller.signal, mine), follow(store, controller.signal, mine)]);
    controller.abort();
    for (const { seen } of [first, second]) expect(seen.filter((e) => e.streamId.startsWith(run)).map((e) => e.id)).toEqual(ids);
    expect(first.pages.length).toBeGreaterThan(5); // pages of at most 7
  });

  it('gives a subscriber inside a kept page the rest of it, then goes on reading', async () => {
    const { store } = fixture;
    const { run, ids } = await appendRun(
      store,
      20,
      (i) => i,
      () => 'SharedA',
    );
    const all = await store.readAll({ eventTypes: TYPES, maxCount: 10_000 });
    const mine = all.events.filter((e) => e.streamId.startsWith(run));
    const start = mine[0]?.position;
    const middle = mine[3]?.position;
    if (!start || !middle) throw new Error('appended events not found');
    const controller = new AbortController();
    const pagesFrom = async (after: typeof start) => {
      const seen: RecordedEvent[] = [];
      for await (const page of store.subscribeToAll({ after, eventTypes: TYPES, maxCount: 7, signal: controller.signal })) {
        seen.push(...page.events);
        if (seen.some((e) => e.id === ids.at(-1))) break;
      }
      return seen.map((e) => e.id);
    };
    // One subscriber from the first event, one from inside its first page (a different position).
    const [fromStart, fromMiddle] = await Promise.all([pagesFrom(start), pagesFrom(middle)]);
    controller.abort();
    expect(fromStart).toEqual(ids.slice(1));
    expect(fromMiddle).toEqual(ids.slice(4));
  });

  it('does not keep a subscriber from commits made after a shared page was read', async () => {
    const { store } = fixture;
    const run = randomUUID().slice(0, 8);
    const mineOf = (seen: RecordedEvent[]) => seen.filter((e) => e.streamId.startsWith(run));
    await store.append(`${run}-early`, [{ id: randomUUID(), type: 'SharedA', data: {} }]);
    const controller = new AbortController();
    // The first subscriber reads (and keeps) the pages up to the early event and waits there.
    let earlyRead = false;
    const early = follow(store, controller.signal, (seen) => {
      earlyRead = mineOf(seen).length >= 1;
      return mineOf(seen).length >= 3;
    });
    await waitFor(() => earlyRead);
    const later = [randomUUID(), randomUUID()];
    for (const id of later) await store.append(`${run}-late`, [{ id, type: 'SharedB', data: {} }]);
    // A second subscriber from the start gets the kept pages, then must read on to the new commits.
    const late = follow(store, controller.signal, (seen) => mineOf(seen).length >= 3);
    const [a, b] = await Promise.all([early, late]);
    controller.abort();
    for (const { seen } of [a, b])
      expect(
        mineOf(seen)
          .slice(1)
          .map((e) => e.id),
      ).toEqual(later);
  }, 15_000);
});
