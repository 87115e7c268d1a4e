import { describe, expect, it } from 'vitest';
import { floorTo, inclusiveEnd } from '../../../shared/series/intervals.ts';
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
