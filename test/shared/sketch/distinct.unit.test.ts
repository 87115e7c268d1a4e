import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  addHashes,
  countDistinct,
  deserializeDistinct,
  emptyDistinct,
  EXACT_LIMIT,
  hashUserId,
  mergeDistinct,
  serializeDistinct,
  type DistinctSketch,
} from '../../../shared/sketch/distinct.ts';
import { slidingMerge } from '../../../projections/kpi/series.ts';

const sketchOf = (ids: readonly string[]): DistinctSketch => addHashes(emptyDistinct(), ids.map(hashUserId));
const ids = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}-${i}`);

describe('distinct-user sketch', () => {
  describe('when it holds at most EXACT_LIMIT users', () => {
    it('counts exactly, and the merge of parts counts the union exactly', () => {
      fc.assert(
        fc.property(fc.array(fc.array(fc.integer({ min: 0, max: 250 }), { maxLength: 200 }), { minLength: 1, maxLength: 6 }), (groups) => {
          const parts = groups.map((g) => sketchOf(g.map((n) => `user-${n}`)));
          const merged = parts.reduce(mergeDistinct, emptyDistinct());
          expect(countDistinct(merged)).toBe(new Set(groups.flat()).size);
        }),
      );
    });
  });

  describe('when the union grows past EXACT_LIMIT', () => {
    it('switches to HyperLogLog within 3 standard errors (σ ≈ 1.6 %), whatever the merge order', () => {
      const hours = Array.from({ length: 24 }, (_, h) => sketchOf(ids('u', 5_000).filter((_, i) => i % 24 === h || i % 7 === h % 7)));
      const forward = hours.reduce(mergeDistinct, emptyDistinct());
      const backward = [...hours].reverse().reduce(mergeDistinct, emptyDistinct());
      expect(forward.kind).toBe('dense');
      expect(countDistinct(forward)).toBe(countDistinct(backward));
      expect(Math.abs(countDistinct(forward) - 5_000) / 5_000).toBeLessThanOrEqual(3 * 0.0163);
      expect(countDistinct(sketchOf(ids('v', EXACT_LIMIT)))).toBe(EXACT_LIMIT);
    });
  });

  describe('when serialised and read back', () => {
    it('is the same sketch in both modes', () => {
      for (const sketch of [sketchOf(ids('a', 10)), sketchOf(ids('b', 3_000)), emptyDistinct()]) {
        expect(deserializeDistinct(serializeDistinct(sketch))).toEqual(sketch);
      }
    });
  });
});

describe('slidingMerge (two stacks)', () => {
  it('equals the naive merge of every window', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 1_000 }), { maxLength: 60 }),
        fc.array(fc.tuple(fc.nat(8), fc.nat(20)), { maxLength: 40 }),
        (atoms, steps) => {
          let lo = 0;
          let hi = 0;
          const windows: [number, number][] = [];
          for (const [a, b] of steps) {
            hi = Math.min(atoms.length, hi + a);
            lo = Math.min(hi, lo + (b % 5));
            windows.push([lo, hi]);
          }
          const sum = (x: number, y: number) => x + y;
          const naive = windows.map(([l, h]) => atoms.slice(l, h).reduce(sum, 0));
          expect(slidingMerge(atoms, windows, 0, sum)).toEqual(naive);
        },
      ),
    );
  });
});
