import { describe, expect, it } from 'vitest';
import { parsePostgresTimestamp, pgDate, pgIso } from '../../../shared/db/timestamps.ts';

describe('parsePostgresTimestamp', () => {
  it('reads a year below 100 as that year, not 19xx or 20xx', () => {
    expect(parsePostgresTimestamp('0045-03-01 00:00:00+00')).toBe('0045-03-01T00:00:00.000Z');
    expect(parsePostgresTimestamp('0001-01-01 00:00:00+00')).toBe('0001-01-01T00:00:00.000Z');
    expect(parsePostgresTimestamp('0099-12-31 23:59:59.999+00')).toBe('0099-12-31T23:59:59.999Z');
  });

  it('applies offsets with hours, minutes and seconds', () => {
    expect(parsePostgresTimestamp('2024-05-01 11:30:00+02')).toBe('2024-05-01T09:30:00.000Z');
    expect(parsePostgresTimestamp('2024-05-01 04:00:00-05:30')).toBe('2024-05-01T09:30:00.000Z');
    expect(parsePostgresTimestamp('1890-01-01 00:53:28+00:53:28')).toBe('1890-01-01T00:00:00.000Z');
  });

  it('truncates microseconds to milliseconds and keeps the bounds of the allowed range', () => {
    expect(parsePostgresTimestamp('1969-12-31 23:59:59.999999+00')).toBe('1969-12-31T23:59:59.999Z');
    expect(parsePostgresTimestamp('9999-12-31 23:59:59+00')).toBe('9999-12-31T23:59:59.000Z');
    expect(parsePostgresTimestamp('1900-01-01 00:00:00+00')).toBe('1900-01-01T00:00:00.000Z');
  });

  it('reads BC years and years past 9999 in ISO 8601 extended form', () => {
    expect(parsePostgresTimestamp('0001-06-01 00:00:00+00 BC')).toBe('0000-06-01T00:00:00.000Z');
    expect(parsePostgresTimestamp('10000-01-01 04:00:00+00')).toBe('+010000-01-01T04:00:00.000Z');
  });

  it('reads timestamp (without zone) as UTC only when told to', () => {
    expect(parsePostgresTimestamp('0045-03-01 00:00:00', { assumeUtc: true })).toBe('0045-03-01T00:00:00.000Z');
    expect(() => parsePostgresTimestamp('0045-03-01 00:00:00')).toThrow();
  });

  it('refuses what is not an instant', () => {
    for (const text of ['infinity', '-infinity', '2024-05-01T00:00:00Z', '']) expect(() => parsePostgresTimestamp(text)).toThrow();
  });
});

describe('pgIso and pgDate', () => {
  it('write ISO text with the plain five-digit year past 9999, and the day of a day-aligned instant', () => {
    const tenThousand = Date.UTC(10_000, 0, 1);
    expect(new Date(tenThousand).toISOString()).toBe('+010000-01-01T00:00:00.000Z'); // what PostgreSQL refuses
    expect(pgIso(tenThousand)).toBe('10000-01-01T00:00:00.000Z');
    expect(pgDate(tenThousand)).toBe('10000-01-01');
    expect(pgIso(Date.UTC(2024, 4, 1, 9, 30, 0, 7))).toBe('2024-05-01T09:30:00.007Z');
    const year45 = new Date(0).setUTCFullYear(45, 2, 1);
    expect(pgIso(year45)).toBe('0045-03-01T00:00:00.000Z');
    expect(parsePostgresTimestamp(`${pgDate(year45)} 00:00:00+00`)).toBe(pgIso(year45));
  });
});
