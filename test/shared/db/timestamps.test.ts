import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql } from '../../../shared/db/pool.ts';
import { parsePostgresTimestamp } from '../../../shared/db/timestamps.ts';
import { createTenantReader } from '../../../shared/db/tenantReader.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';

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

describe('timestamptz through the pool (real PostgreSQL)', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db?.drop();
  });

  const readBack = (instants: readonly string[], timeZone = 'UTC') =>
    db.pool.transaction(async (tx) => {
      await tx.query(sql.type(z.object({}))`select set_config('timezone', ${timeZone}, true)`);
      return tx.anyFirst(sql.type(z.object({ t: z.string() }))`
        select t from unnest(${sql.array(instants, 'timestamptz')}) with ordinality as u(t, n) order by n
      `);
    });

  it('round-trips every millisecond instant of years 1–9999, whatever the session time zone', async () => {
    const instants = fc.date({ min: new Date('0001-01-01T00:00:00.000Z'), max: new Date('9999-12-31T23:59:59.999Z'), noInvalidDate: true });
    await fc.assert(
      fc.asyncProperty(fc.array(instants, { minLength: 1, maxLength: 50 }), fc.constantFrom('UTC', 'Europe/Berlin', 'America/St_Johns', 'Asia/Kolkata'), async (dates, zone) => {
        const iso = dates.map((d) => d.toISOString());
        expect(await readBack(iso, zone)).toEqual(iso);
      }),
      { numRuns: 40, seed: 20261123 },
    );
  });

  it('reads 0045-03-01 back as year 45, not 1945 or 2045', async () => {
    expect(await readBack(['0045-03-01T00:00:00.000Z'])).toEqual(['0045-03-01T00:00:00.000Z']);
  });

  it('the tenant reader (the list path) reads timestamps exactly too', async () => {
    const reader = await createTenantReader(db.url, { maximumPoolSize: 1 });
    try {
      const instants = ['0045-03-01T00:00:00.000Z', '1900-01-01T00:00:00.000Z', '1969-12-31T23:59:59.999Z', '9999-12-31T23:59:59.000Z'];
      const rows = await reader.read(randomUUID(), (q) =>
        q.any(sql.type(z.object({ t: z.string() }))`select t from unnest(${sql.array(instants, 'timestamptz')}) with ordinality as u(t, n) order by n`),
      );
      expect(rows.map((r) => r.t)).toEqual(instants);
    } finally {
      await reader.end();
    }
  });
});
