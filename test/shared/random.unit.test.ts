import { monotonicFactory } from 'ulid';
import { describe, expect, it } from 'vitest';
import { bufferedRandom } from '../../shared/random.ts';

describe('bufferedRandom (the ulid PRNG)', () => {
  it('gives bytes of the CSPRNG as floats in [0, 1), across block refills, evenly spread', () => {
    const random = bufferedRandom(64);
    const counts = new Array<number>(256).fill(0);
    for (let i = 0; i < 256 * 400; i++) {
      const value = random();
      expect(value >= 0 && value < 1).toBe(true);
      const bucket = value * 256;
      expect(Number.isInteger(bucket)).toBe(true);
      counts[bucket] = (counts[bucket] ?? 0) + 1;
    }
    // 400 expected per byte value; a fair source stays well inside ±40 % (about ±8 sigma).
    expect(Math.min(...counts)).toBeGreaterThan(240);
    expect(Math.max(...counts)).toBeLessThan(560);
  });

  it('makes unique, sortable ULIDs', () => {
    const next = monotonicFactory(bufferedRandom());
    const ids = Array.from({ length: 10_000 }, (_, i) => next(1_700_000_000_000 + Math.floor(i / 100)));
    expect(new Set(ids).size).toBe(ids.length);
    expect([...ids].sort()).toEqual(ids);
  });
});
