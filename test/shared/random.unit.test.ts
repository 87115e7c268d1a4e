import { monotonicFactory } from 'ulid';
import { describe, expect, it } from 'vitest';
import { bufferedBytes, bufferedRandom } from '../../shared/random.ts';

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

describe('buffered random bytes', () => {
  it('hands out copies of the length asked, never the same bytes twice, across block refills', () => {
    const next = bufferedBytes(64);
    const seen = new Set<string>();
    for (let i = 0; i < 100; i++) {
      const bytes = next(12);
      expect(bytes.length).toBe(12);
      seen.add(bytes.toString('hex'));
    }
    expect(seen.size).toBe(100);
  });

  it('gives each caller its own buffer, so changing one changes no other', () => {
    const next = bufferedBytes(64);
    const a = next(8);
    const copy = Buffer.from(a);
    next(8).fill(0);
    expect(a).toEqual(copy);
  });

  it('refuses more than a block at once', () => {
    expect(() => bufferedBytes(16)(17)).toThrow(RangeError);
  });
});
