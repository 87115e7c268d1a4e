import { describe, expect, it } from 'vitest';
import { floorTo, inclusiveEnd, isoInstant } from '../../../shared/series/intervals.ts';
import { utcDay } from '../../../projections/workforce/versions.ts';

const at = (iso: string) => Date.parse(iso);

describe('series interval arithmetic', () => {
  it('floors days and months in UTC, before 1970 too (hire dates go back to 1900)', () => {
    expect(floorTo('day', at('1969-12-31T23:59:59.999Z'))).toBe(at('1969-12-31T00:00:00Z'));
    expect(floorTo('month', at('1900-02-28T12:00:00Z'))).toBe(at('1900-02-01T00:00:00Z'));
    expect(utcDay(at('1969-12-31T23:59:59.999Z'))).toBe('1969-12-31');
  });

  it('ends what holds at an instant inclusive just after it: the next millisecond is not in it', () => {
    const t = at('2026-01-31T23:59:59.999Z');
    expect(inclusiveEnd(t)).toBe(at('2026-02-01T00:00:00Z'));
    expect(floorTo('day', inclusiveEnd(t))).toBe(at('2026-02-01T00:00:00Z'));
  });
});

describe('isoInstant', () => {
  it('writes what Date#toISOString writes, across years, days and milliseconds', () => {
    const instants = [
      0,
      -1,
      1,
      999,
      86_399_999,
      Date.UTC(1900, 0, 1),
      Date.UTC(2024, 1, 29, 23, 59, 59, 7),
      Date.UTC(2026, 11, 31, 12, 0, 0, 10),
      at('0099-06-15T01:02:03.004Z'),
      at('0000-01-01T00:00:00Z'),
      at('9999-12-31T23:59:59.999Z'),
    ];
    // Every 7,919,013,013 ms (about 92 days; an odd step, so every field takes many values) from 1800 to 2200.
    for (let t = Date.UTC(1800, 0, 1); t < Date.UTC(2200, 0, 1); t += 7_919_013_013) instants.push(t);
    for (const t of instants) expect(isoInstant(t)).toBe(new Date(t).toISOString());
  });

  it('leaves years outside 0000–9999 to the built-in (signed, six digits)', () => {
    for (const t of [at('-000001-01-01T00:00:00Z'), at('+010000-01-01T00:00:00Z'), at('0000-01-01T00:00:00Z') - 1])
      expect(isoInstant(t)).toBe(new Date(t).toISOString());
  });
});
