import { describe, expect, it } from 'vitest';
import type { GlobalPosition, RecordedEvent } from '../../../shared/event-store/port.ts';
import { createApplyOrder, type LateApply } from '../../../shared/projections/applyOrder.ts';

const at = (n: number): GlobalPosition => ({ commit: BigInt(n), prepare: BigInt(n) });
let ordinal = 0n;
/** A late apply recorded right after position `n` (each one later than the one before). */
const lateAt = (n: number): LateApply => ({ after: at(n), ordinal: ++ordinal });
/** Event `id` of `stream` at log position `n`. */
const e = (id: string, stream: string, n: number): RecordedEvent => ({
  id,
  streamId: stream,
  revision: 0,
  type: 'T',
  data: {},
  metadata: {},
  position: at(n),
  recordedAt: '2026-01-01T00:00:00.000Z',
});
const ids = (runs: RecordedEvent[][]) => runs.map((run) => run.map((x) => x.id));

describe('the order a rebuild applies the log in (applyOrder.ts)', () => {
  it('applies an event retried after position 5 right after 5, with the later events of its stream that waited behind it', () => {
    const order = createApplyOrder(
      new Map([
        ['r', lateAt(5)],
        ['r2', lateAt(5)],
      ]),
      () => new Set(),
    );
    const log = [e('a', 'A', 1), e('r', 'R', 2), e('b', 'B', 3), e('r2', 'R', 4), e('c', 'C', 5), e('d', 'D', 6), e('r3', 'R', 7)];
    expect(ids(order.runs(log.slice(0, 5)))).toEqual([['a', 'b', 'c']]);
    expect(ids(order.runs(log.slice(5)))).toEqual([
      ['r', 'r2'],
      ['d', 'r3'],
    ]);
    expect(order.rest()).toEqual({ late: [], parked: [] });
  });

  it('holds events parked in the live model, and every later event of their streams, to the end', () => {
    const parked = new Set(['p']);
    const order = createApplyOrder(new Map(), () => parked);
    expect(ids(order.runs([e('a', 'A', 1), e('p', 'P', 2), e('b', 'B', 3), e('p2', 'P', 4), e('c', 'C', 5)]))).toEqual([['a', 'b', 'c']]);
    expect(order.rest().parked.map((x) => x.id)).toEqual(['p', 'p2']);
  });

  it('reads the parked set at every call, and releases late events in point order, then log order', () => {
    const parked = new Set<string>();
    const order = createApplyOrder(
      new Map([
        ['x', lateAt(9)],
        ['y', lateAt(6)],
      ]),
      () => parked,
    );
    expect(ids(order.runs([e('x', 'X', 1), e('y', 'Y', 2), e('a', 'A', 3)]))).toEqual([['a']]);
    parked.add('q');
    expect(ids(order.runs([e('q', 'Q', 4), e('b', 'B', 7), e('c', 'C', 10)]))).toEqual([['y'], ['b'], ['x'], ['c']]);
    expect(order.rest().parked.map((x) => x.id)).toEqual(['q']);
  });

  it('releases events recorded at one point in the order recorded, not in log order (two retries with nothing between)', () => {
    const first = lateAt(8);
    const second = lateAt(8);
    const order = createApplyOrder(
      new Map([
        ['y', second],
        ['x', first],
      ]),
      () => new Set(),
    );
    expect(ids(order.runs([e('y', 'Y', 2), e('x', 'X', 3), e('a', 'A', 4), e('b', 'B', 9)]))).toEqual([['a'], ['x', 'y'], ['b']]);
  });

  it('keeps a stream in order when its later event was recorded at an earlier point', () => {
    const order = createApplyOrder(
      new Map([
        ['s1', lateAt(9)],
        ['s2', lateAt(6)],
      ]),
      () => new Set(),
    );
    expect(ids(order.runs([e('s1', 'S', 2), e('s2', 'S', 3), e('a', 'A', 7), e('b', 'B', 10)]))).toEqual([['a'], ['s1', 's2'], ['b']]);
  });

  it('gives late applies whose point no event passed before the parked ones', () => {
    const order = createApplyOrder(new Map([['r', lateAt(50)]]), () => new Set(['p']));
    expect(ids(order.runs([e('p', 'P', 1), e('r', 'R', 2), e('a', 'A', 3)]))).toEqual([['a']]);
    const rest = order.rest();
    expect([rest.late.map((x) => x.id), rest.parked.map((x) => x.id)]).toEqual([['r'], ['p']]);
  });

  it('restores what it held when a transaction that took it runs again', () => {
    const order = createApplyOrder(new Map(), () => new Set(['p']));
    order.runs([e('p', 'P', 1)]);
    const restore = order.save();
    expect(order.rest().parked.map((x) => x.id)).toEqual(['p']);
    restore();
    expect(order.rest().parked.map((x) => x.id)).toEqual(['p']);
  });
});
