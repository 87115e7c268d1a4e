import { describe, expect, it } from 'vitest';
import { cacheSize, MAX_CACHE_SIZE } from '../../shared/cacheSize.ts';

describe('cacheSize', () => {
  it('gives a whole size from 1 to the maximum, and the fallback for no number', () => {
    const cases: [number | undefined, number][] = [
      [undefined, 7],
      [Number.NaN, 7],
      [0, 1],
      [-5, 1],
      [Number.NEGATIVE_INFINITY, 1],
      [0.5, 1],
      [2.7, 2],
      [10_000, 10_000],
      [2 ** 32, MAX_CACHE_SIZE],
      [Number.POSITIVE_INFINITY, MAX_CACHE_SIZE],
    ];
    expect(cases.map(([asked]) => cacheSize(asked, 7))).toEqual(cases.map(([, size]) => size));
  });
});
