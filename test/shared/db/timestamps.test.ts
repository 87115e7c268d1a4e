import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql } from '../../../shared/db/pool.ts';
import { createTenantReader } from '../../../shared/db/tenantReader.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';

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
      fc.asyncProperty(
        fc.array(instants, { minLength: 1, maxLength: 50 }),
        fc.constantFrom('UTC', 'Europe/Berlin', 'America/St_Johns', 'Asia/Kolkata'),
        async (dates, zone) => {
          const iso = dates.map((d) => d.toISOString());
          expect(await readBack(iso, zone)).toEqual(iso);
        },
      ),
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
        q.any(
          sql.type(
            z.object({ t: z.string() }),
          )`select t from unnest(${sql.array(instants, 'timestamptz')}) with ordinality as u(t, n) order by n`,
        ),
      );
      expect(rows.map((r) => r.t)).toEqual(instants);
    } finally {
      await reader.end();
    }
  });
});
