import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  addValue,
  createSketch,
  deserializeSketch,
  mergeInto,
  mergeSerializedInto,
  quantileSerialized,
  quantile,
  serializeSketch,
} from '../../../shared/sketch/ddsketch.ts';
import { seededRandom as random } from '../../support/random.ts';

const normal = (rnd: () => number) => Math.sqrt(-2 * Math.log(1 - rnd())) * Math.cos(2 * Math.PI * rnd());

const distributions: Record<string, (rnd: () => number) => number> = {
  'uniform 0–500 ms': (rnd) => rnd() * 500,
  'exponential mean 40 ms': (rnd) => -Math.log(1 - rnd()) * 40,
  'log-normal median 20 ms, σ 1.2': (rnd) => Math.exp(Math.log(20) + 1.2 * normal(rnd)),
  'pareto α 1.5 from 2 ms (heavy tail)': (rnd) => 2 / Math.pow(1 - rnd(), 1 / 1.5),
  'bimodal 3 ms cache hits / 250 ms misses': (rnd) => (rnd() < 0.9 ? 3 + rnd() : 250 + normal(rnd) * 30 + 100),
};

const exactQuantile = (sorted: Float64Array, q: number) => sorted[Math.floor(q * (sorted.length - 1))] ?? NaN;

describe('DDSketch', () => {
  describe('when fed 200,000 random durations', () => {
    for (const [name, draw] of Object.entries(distributions)) {
      it(`answers p50, p95 and p99 within 1 % of the exact value (${name})`, () => {
        const rnd = random(name.length * 7919);
        const values = new Float64Array(200_000);
        const sketch = createSketch();
        for (let i = 0; i < values.length; i++) {
          const value = Math.max(0.01, draw(rnd));
          values[i] = value;
          addValue(sketch, value);
        }
        const sorted = values.slice().sort();
        for (const q of [0.5, 0.95, 0.99]) {
          const exact = exactQuantile(sorted, q);
          const estimate = quantile(sketch, q) ?? NaN;
          expect(Math.abs(estimate - exact) / exact).toBeLessThanOrEqual(0.01);
        }
        expect(sketch.count).toBe(values.length);
        // Bucket count depends on the value range, not on how many values went in.
        expect(sketch.bins.size).toBeLessThan(3_000);
      });
    }
  });

  describe('when per-minute sketches are merged', () => {
    it('gives the same p95 as one sketch over all values (exact merge)', () => {
      const rnd = random(42);
      const whole = createSketch();
      const merged = createSketch();
      const values: number[] = [];
      for (let minute = 0; minute < 1_440; minute++) {
        const part = createSketch();
        for (let i = 0; i < 80; i++) {
          const value = Math.exp(Math.log(30) + normal(rnd));
          values.push(value);
          addValue(part, value);
          addValue(whole, value);
        }
        // Round-trip each minute through its stored form, as the rollup does.
        mergeInto(merged, deserializeSketch(serializeSketch(part)));
      }
      expect(merged.count).toBe(whole.count);
      expect([...merged.bins].sort()).toEqual([...whole.bins].sort());
      const exact = exactQuantile(Float64Array.from(values).sort(), 0.95);
      expect(Math.abs((quantile(merged, 0.95) ?? NaN) - exact) / exact).toBeLessThanOrEqual(0.01);
    });

    it('refuses to merge sketches of different accuracy', () => {
      expect(() => mergeInto(createSketch(0.005), createSketch(0.01))).toThrow(RangeError);
    });
  });

  describe('when serialized', () => {
    it('round-trips any sketch exactly', () => {
      fc.assert(
        fc.property(fc.array(fc.double({ min: 0, max: 1e7, noNaN: true }), { maxLength: 300 }), (values) => {
          const sketch = createSketch();
          for (const v of values) addValue(sketch, v);
          const back = deserializeSketch(serializeSketch(sketch));
          expect(back.count).toBe(sketch.count);
          expect(back.zeroCount).toBe(sketch.zeroCount);
          expect(back.min).toBe(sketch.min);
          expect(back.max).toBe(sketch.max);
          expect([...back.bins].sort()).toEqual([...sketch.bins].sort());
          for (const q of [0, 0.5, 0.95, 1]) expect(quantile(back, q)).toBe(quantile(sketch, q));
        }),
      );
    });

    it('keeps counts above 2^32 exact', () => {
      const sketch = createSketch();
      addValue(sketch, 12.5, 2 ** 40 + 3);
      expect(deserializeSketch(serializeSketch(sketch)).count).toBe(2 ** 40 + 3);
    });

    it('rejects a truncated or corrupted buffer', () => {
      const sketch = createSketch();
      for (let i = 1; i < 100; i++) addValue(sketch, i);
      const bytes = serializeSketch(sketch);
      expect(() => deserializeSketch(bytes.subarray(0, bytes.length - 3))).toThrow(RangeError);
      expect(() => deserializeSketch(Buffer.concat([bytes, Buffer.from([1])]))).toThrow(RangeError);
    });
  });

  describe('when empty or degenerate', () => {
    it('has no quantile when empty, and reports 0 for zero durations', () => {
      const sketch = createSketch();
      expect(quantile(sketch, 0.95)).toBeUndefined();
      addValue(sketch, 0, 10);
      expect(quantile(sketch, 0.95)).toBe(0);
    });

    it('rejects negative and non-finite values', () => {
      expect(() => addValue(createSketch(), -1)).toThrow(RangeError);
      expect(() => addValue(createSketch(), Number.NaN)).toThrow(RangeError);
      expect(() => addValue(createSketch(), Number.POSITIVE_INFINITY)).toThrow(RangeError);
    });
  });
});

describe('mergeSerializedInto (the KPI query’s merge path)', () => {
  it('gives the same sketch as deserialize + mergeInto, and refuses a corrupt one', () => {
    fc.assert(
      fc.property(fc.array(fc.array(fc.double({ min: 0, max: 1e6, noNaN: true }), { maxLength: 200 }), { maxLength: 8 }), (groups) => {
        const stored = groups.map((values) => {
          const sketch = createSketch();
          for (const v of values) addValue(sketch, v);
          return serializeSketch(sketch);
        });
        const slow = createSketch();
        for (const bytes of stored) mergeInto(slow, deserializeSketch(bytes));
        const fast = createSketch();
        for (const bytes of stored) mergeSerializedInto(fast, bytes);
        expect(fast).toEqual(slow);
      }),
    );
    const bytes = serializeSketch(createSketch());
    expect(() => mergeSerializedInto(createSketch(), bytes.subarray(0, bytes.length - 1))).toThrow(RangeError);
  });
});

describe('quantileSerialized (one stored row, no sketch built)', () => {
  it('answers what quantile(deserializeSketch(bytes)) answers', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ min: 0, max: 1e6, noNaN: true }), { maxLength: 300 }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        (values, q) => {
          const sketch = createSketch();
          for (const v of values) addValue(sketch, v);
          const bytes = serializeSketch(sketch);
          expect(quantileSerialized(bytes, q)).toBe(quantile(deserializeSketch(bytes), q));
        },
      ),
    );
  });
});
