import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { EventStore, ReadAllPage, RecordedEvent } from '../../../shared/event-store/port.ts';
import { useTestEventStore } from '../../support/database.ts';

/**
 * Live subscriptions of one store (one process) share their page reads (issue 14): the
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

describe('shared subscription pages (PostgreSQL adapter)', () => {
  const fixture = useTestEventStore();

  it('serves one read to subscribers at the same position, and each still sees every event once, in order', async () => {
    const { store } = fixture;
    const run = randomUUID().slice(0, 8);
    const ids: string[] = [];
    for (let i = 0; i < 40; i++) {
      const id = randomUUID();
      ids.push(id);
      await store.append(`${run}-${i % 5}`, [{ id, type: i % 2 ? 'SharedA' : 'SharedB', data: { i } }]);
    }
    const controller = new AbortController();
    const mine = (seen: RecordedEvent[]) => seen.filter((e) => e.streamId.startsWith(run)).length >= 40;
    const [first, second] = await Promise.all([follow(store, controller.signal, mine), follow(store, controller.signal, mine)]);
    controller.abort();
    for (const { seen } of [first, second]) expect(seen.filter((e) => e.streamId.startsWith(run)).map((e) => e.id)).toEqual(ids);
    // Started together at the same position: their pages are the very same objects (read once).
    const shared = first.pages.filter((page) => second.pages.includes(page));
    expect(shared.length).toBe(first.pages.length);
  });

  it('does not keep a subscriber from commits made after a shared page was read', async () => {
    const { store } = fixture;
    const run = randomUUID().slice(0, 8);
    const mineOf = (seen: RecordedEvent[]) => seen.filter((e) => e.streamId.startsWith(run));
    await store.append(`${run}-early`, [{ id: randomUUID(), type: 'SharedA', data: {} }]);
    const controller = new AbortController();
    // The first subscriber reads (and keeps) the pages up to the early event and waits there.
    const early = follow(store, controller.signal, (seen) => mineOf(seen).length >= 3);
    await new Promise((r) => setTimeout(r, 300));
    const later = [randomUUID(), randomUUID()];
    for (const id of later) await store.append(`${run}-late`, [{ id, type: 'SharedB', data: {} }]);
    // A second subscriber from the start gets the kept pages, then must read on to the new commits.
    const late = follow(store, controller.signal, (seen) => mineOf(seen).length >= 3);
    const [a, b] = await Promise.all([early, late]);
    controller.abort();
    for (const { seen } of [a, b]) expect(mineOf(seen).slice(1).map((e) => e.id)).toEqual(later);
  }, 15_000);
});
