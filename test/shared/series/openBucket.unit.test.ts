import { describe, expect, it } from 'vitest';
import { seriesPoint, withOpenBucket } from '../../../shared/series/openBucket.ts';

const HOUR = 3_600_000;
const T0 = Date.UTC(2026, 10, 27, 9); // 09:00
const boundaries = [T0, T0 + HOUR, T0 + 2 * HOUR, T0 + 3 * HOUR];
const closed = (...ats: number[]) => ats.map((at) => ({ at, partial: false }));

describe('withOpenBucket', () => {
  describe('when the range reaches the horizon inside a bucket', () => {
    it('answers the closed boundaries up to the horizon, then the horizon itself, partial', () => {
      const horizon = T0 + HOUR + 17 * 60_000; // 10:17
      expect(withOpenBucket(boundaries, { from: T0, to: T0 + 3 * HOUR }, horizon)).toEqual([
        ...closed(T0, T0 + HOUR),
        { at: horizon, partial: true },
      ]);
    });

    it('answers only the open point when no boundary has passed yet (a range inside the current bucket)', () => {
      const horizon = T0 + 5 * 60_000;
      expect(withOpenBucket([T0 + HOUR], { from: T0 + 60_000, to: T0 + HOUR }, horizon)).toEqual([{ at: horizon, partial: true }]);
    });
  });

  describe('when the range ends before the horizon (in the past)', () => {
    it('answers the closed boundaries only', () => {
      expect(withOpenBucket(boundaries, { from: T0, to: T0 + 3 * HOUR }, T0 + 3 * HOUR + 1)).toEqual(closed(...boundaries));
      expect(withOpenBucket(boundaries.slice(0, 2), { from: T0, to: T0 + HOUR + 30 * 60_000 }, T0 + 2 * HOUR + 1)).toEqual(
        closed(T0, T0 + HOUR),
      );
    });
  });

  describe('when the horizon is exactly a boundary', () => {
    it('answers that boundary as closed, with no open point', () => {
      expect(withOpenBucket(boundaries, { from: T0, to: T0 + 3 * HOUR }, T0 + 2 * HOUR)).toEqual(closed(T0, T0 + HOUR, T0 + 2 * HOUR));
    });
  });

  describe('when the range starts after the horizon', () => {
    it('answers nothing', () => {
      expect(withOpenBucket([T0 + 2 * HOUR], { from: T0 + 2 * HOUR, to: T0 + 3 * HOUR }, T0 + HOUR + 1)).toEqual([]);
    });
  });
});

describe('seriesPoint', () => {
  it('flags only the open point; closed points carry no flag', () => {
    expect(seriesPoint({ at: T0, partial: false }, 3)).toEqual({ at: '2026-11-27T09:00:00.000Z', value: 3 });
    expect(seriesPoint({ at: T0 + 1, partial: true }, 4)).toEqual({ at: '2026-11-27T09:00:00.001Z', value: 4, partial: true });
  });
});
