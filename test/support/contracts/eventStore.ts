import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConflictError, WrongExpectedRevisionError } from '../../../shared/errors.ts';
import { START, comparePositions, type EventStore, type NewEvent, type RecordedEvent } from '../../../shared/event-store/port.ts';
import type { DataKeyStore } from '../../../shared/personal-data/dataKeys.ts';
import { sealedContractStore, sealingContract, type SealingFixture } from './sealing.ts';

/**
 * The event-store contract: every adapter runs exactly these tests. The factory is called once
 * per suite and may share a store with other test files, so every test uses its own streams.
 */
export type EventStoreFixture = { store: EventStore; sealing: SealingFixture; teardown(): Promise<void> };

const event = (type: string, data: Record<string, unknown> = {}): NewEvent => ({
  id: randomUUID(),
  type,
  data,
  metadata: { actor: 'contract-test' },
});

/** Reads everything after `after` for this test's streams (other tests write to the same log). */
async function readAllOf(store: EventStore, streams: ReadonlySet<string>, after = START): Promise<RecordedEvent[]> {
  const seen: RecordedEvent[] = [];
  let position = after;
  for (;;) {
    const page = await store.readAll({ after: position, maxCount: 500 });
    seen.push(...page.events.filter((e) => streams.has(e.streamId)));
    if (comparePositions(page.checkpoint, position) === 0) return seen;
    position = page.checkpoint;
  }
}

export function eventStoreContract(name: string, createFixture: () => Promise<EventStoreFixture>): void {
  describe(`event store contract: ${name}`, () => {
    let fixture: EventStoreFixture;
    let store: EventStore;
    let sealed: { store: EventStore; keys: DataKeyStore };
    const streamId = (label: string) => `contract_${label}-${randomUUID()}`;

    beforeAll(async () => {
      fixture = await createFixture();
      store = fixture.store;
      sealed = sealedContractStore(store, fixture.sealing.keysPool);
    });
    afterAll(async () => {
      await fixture?.teardown();
    });

    describe('when the stream does not exist', () => {
      it('reads as empty', async () => {
        expect(await store.readStream(streamId('missing'))).toEqual([]);
      });

      it('accepts an append expecting no stream and numbers revisions from 0', async () => {
        const id = streamId('new');
        const result = await store.append(id, [event('A'), event('B')], { expectedRevision: 'no_stream' });
        expect(result.nextRevision).toBe(1);
        const events = await store.readStream(id);
        expect(events.map((e) => [e.type, e.revision])).toEqual([
          ['A', 0],
          ['B', 1],
        ]);
        expect(comparePositions(result.position, events[1]!.position)).toBe(0);
      });

      it('refuses an append expecting an exact revision or an existing stream', async () => {
        const id = streamId('absent');
        await expect(store.append(id, [event('A')], { expectedRevision: 0 })).rejects.toBeInstanceOf(WrongExpectedRevisionError);
        await expect(store.append(id, [event('A')], { expectedRevision: 'stream_exists' })).rejects.toBeInstanceOf(
          WrongExpectedRevisionError,
        );
        expect(await store.readStream(id)).toEqual([]);
      });
    });

    describe('when the stream exists', () => {
      it('appends at the exact expected revision and refuses a stale one', async () => {
        const id = streamId('exact');
        await store.append(id, [event('A')], { expectedRevision: 'no_stream' });
        const second = await store.append(id, [event('B')], { expectedRevision: 0 });
        expect(second.nextRevision).toBe(1);
        const stale = store.append(id, [event('C')], { expectedRevision: 0 });
        await expect(stale).rejects.toBeInstanceOf(WrongExpectedRevisionError);
        await expect(store.append(id, [event('C')], { expectedRevision: 'no_stream' })).rejects.toBeInstanceOf(WrongExpectedRevisionError);
        expect((await store.readStream(id)).map((e) => e.type)).toEqual(['A', 'B']);
      });

      it('appends with any and with stream_exists', async () => {
        const id = streamId('any');
        await store.append(id, [event('A')]);
        await store.append(id, [event('B')], { expectedRevision: 'any' });
        const result = await store.append(id, [event('C')], { expectedRevision: 'stream_exists' });
        expect(result.nextRevision).toBe(2);
      });

      it('treats a retried append with the same event ids as done once', async () => {
        const id = streamId('idempotent');
        const batch = [event('A', { n: 1 }), event('B', { n: 2 })];
        const first = await store.append(id, batch, { expectedRevision: 'no_stream' });
        const retry = await store.append(id, batch, { expectedRevision: 'no_stream' });
        expect(retry.nextRevision).toBe(first.nextRevision);
        expect(await store.readStream(id)).toHaveLength(2);
      });

      it('keeps data and metadata intact', async () => {
        const id = streamId('data');
        const data = { text: 'zoë ✓', nested: { n: 1.5, list: [1, 'two', null] }, flag: false };
        await store.append(id, [{ id: randomUUID(), type: 'Shaped', data, metadata: { tenantId: 't1', actor: 'u1' } }]);
        const [recorded] = await store.readStream(id);
        expect(recorded?.data).toEqual(data);
        expect(recorded?.metadata).toMatchObject({ tenantId: 't1', actor: 'u1' });
        expect(new Date(recorded!.recordedAt).toISOString()).toBe(recorded!.recordedAt);
      });

      it('reads a stream from a revision, bounded by a count', async () => {
        const id = streamId('range');
        await store.append(
          id,
          ['A', 'B', 'C', 'D'].map((t) => event(t)),
        );
        const events = await store.readStream(id, { fromRevision: 1, maxCount: 2 });
        expect(events.map((e) => e.type)).toEqual(['B', 'C']);
      });
    });

    describe('when appending to several streams at once (appendMany)', () => {
      it('appends every stream, each event with its own global position, results in request order', async () => {
        const a = streamId('many-a');
        const b = streamId('many-b');
        const head = await store.headPosition();
        const [ra, rb] = await store.appendMany([
          { streamId: a, events: [event('A1'), event('A2')], expectedRevision: 'no_stream' },
          { streamId: b, events: [event('B1')], expectedRevision: 'no_stream' },
        ]);
        expect(ra?.nextRevision).toBe(1);
        expect(rb?.nextRevision).toBe(0);
        const mine = await readAllOf(store, new Set([a, b]), head);
        expect(mine.map((e) => e.type).sort()).toEqual(['A1', 'A2', 'B1']);
        expect(new Set(mine.map((e) => `${e.position.commit}-${e.position.prepare}`)).size).toBe(3);
        expect(comparePositions(ra!.position, mine.find((e) => e.type === 'A2')!.position)).toBe(0);
        expect(comparePositions(rb!.position, mine.find((e) => e.type === 'B1')!.position)).toBe(0);
      });

      it('appends nothing anywhere when one stream is not at its expected revision', async () => {
        const a = streamId('many-ok');
        const b = streamId('many-taken');
        await store.append(b, [event('Taken')], { expectedRevision: 'no_stream' });
        const attempt = store.appendMany([
          { streamId: a, events: [event('A1')], expectedRevision: 'no_stream' },
          { streamId: b, events: [event('B1')], expectedRevision: 'no_stream' },
        ]);
        await expect(attempt).rejects.toBeInstanceOf(WrongExpectedRevisionError);
        await expect(attempt).rejects.toMatchObject({ streamId: b, actual: 0 });
        expect(await store.readStream(a)).toEqual([]);
        expect((await store.readStream(b)).map((e) => e.type)).toEqual(['Taken']);
      });

      it('treats a retry with the same event ids as done once', async () => {
        const a = streamId('many-retry-a');
        const b = streamId('many-retry-b');
        const requests = [
          { streamId: a, events: [event('A1')], expectedRevision: 'no_stream' as const },
          { streamId: b, events: [event('B1')], expectedRevision: 'no_stream' as const },
        ];
        const first = await store.appendMany(requests);
        const retry = await store.appendMany(requests);
        expect(retry.map((r) => r.nextRevision)).toEqual(first.map((r) => r.nextRevision));
        expect(comparePositions(retry[1]!.position, first[1]!.position)).toBe(0);
        expect(await store.readStream(a)).toHaveLength(1);
        expect(await store.readStream(b)).toHaveLength(1);
      });

      it('refuses the same stream twice in one call', async () => {
        const a = streamId('many-twice');
        await expect(
          store.appendMany([
            { streamId: a, events: [event('A1')] },
            { streamId: a, events: [event('A2')] },
          ]),
        ).rejects.toThrow(/at most once/);
        expect(await store.readStream(a)).toEqual([]);
      });

      it('refuses an event id carried twice, in one stream or across two, and appends nothing', async () => {
        const a = streamId('many-id-twice-a');
        const b = streamId('many-id-twice-b');
        const once = event('A1');
        await expect(
          store.appendMany([
            { streamId: a, events: [once] },
            { streamId: b, events: [{ ...once, type: 'B1' }] },
          ]),
        ).rejects.toBeInstanceOf(ConflictError);
        await expect(store.appendMany([{ streamId: a, events: [once, { ...once, type: 'A2' }] }])).rejects.toThrow(
          /appears more than once/,
        );
        await expect(store.append(a, [once, { ...once, type: 'A2' }])).rejects.toBeInstanceOf(ConflictError);
        expect(await store.readStream(a)).toEqual([]);
        expect(await store.readStream(b)).toEqual([]);
      });
    });

    describe('when reading all', () => {
      it('returns events in global order, after an exclusive position, and moves the checkpoint', async () => {
        const head = await store.headPosition();
        const a = streamId('all-a');
        const b = streamId('all-b');
        await store.append(a, [event('A1')]);
        await store.append(b, [event('B1')]);
        await store.append(a, [event('A2')]);
        const mine = await readAllOf(store, new Set([a, b]), head);
        expect(mine.map((e) => e.type)).toEqual(['A1', 'B1', 'A2']);
        for (let i = 1; i < mine.length; i++) expect(comparePositions(mine[i - 1]!.position, mine[i]!.position)).toBe(-1);
        const afterFirst = await readAllOf(store, new Set([a, b]), mine[0]!.position);
        expect(afterFirst.map((e) => e.type)).toEqual(['B1', 'A2']);
        expect(comparePositions(await store.headPosition(), mine[2]!.position)).toBeGreaterThanOrEqual(0);
      });

      it('filters by event type while the checkpoint still advances past other events', async () => {
        const head = await store.headPosition();
        const id = streamId('filtered');
        const wanted = `Wanted_${randomUUID().slice(0, 8)}`;
        const last = await store.append(id, [event('Other'), event(wanted), event('Other')]);
        let position = head;
        const found: RecordedEvent[] = [];
        for (;;) {
          const page = await store.readAll({ after: position, eventTypes: [wanted] });
          found.push(...page.events);
          expect(page.events.every((e) => e.type === wanted)).toBe(true);
          if (comparePositions(page.checkpoint, position) === 0) break;
          position = page.checkpoint;
        }
        expect(found.map((e) => e.streamId)).toEqual([id]);
        expect(comparePositions(position, last.position)).toBeGreaterThanOrEqual(0);
      });
    });

    describe('when subscribed to all', () => {
      it('catches up from a position, then delivers live events exactly once, in order', async () => {
        const head = await store.headPosition();
        const id = streamId('sub');
        await store.append(id, [event('Before1'), event('Before2')]);
        const controller = new AbortController();
        const received: RecordedEvent[] = [];
        const consumed = (async () => {
          for await (const page of store.subscribeToAll({ after: head, signal: controller.signal, pollIntervalMs: 50 })) {
            received.push(...page.events.filter((e) => e.streamId === id));
            if (received.length >= 4) controller.abort();
          }
        })();
        await store.append(id, [event('Live1')]);
        await store.append(id, [event('Live2')]);
        await consumed;
        expect(received.map((e) => e.type)).toEqual(['Before1', 'Before2', 'Live1', 'Live2']);
      });

      it('stops when its signal aborts while waiting for events', async () => {
        const controller = new AbortController();
        const head = await store.headPosition();
        const consumed = (async () => {
          let pages = 0;
          for await (const page of store.subscribeToAll({
            after: head,
            signal: controller.signal,
            eventTypes: [`Never_${randomUUID()}`],
          })) {
            pages += page.events.length;
          }
          return pages;
        })();
        setTimeout(() => controller.abort(), 100);
        await expect(consumed).resolves.toBe(0);
      });
    });

    describe('behind the sealing boundary', () => {
      sealingContract(() => ({ ...sealed, fixture: fixture.sealing }));
    });
  });
}
