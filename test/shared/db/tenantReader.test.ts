import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql } from '../../../shared/db/pool.ts';
import { createTenantReader, type TenantReader } from '../../../shared/db/tenantReader.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * The transaction-free tenant reader (the list path) on real PostgreSQL: each statement goes out
 * in one batch behind its own transaction-local `app.tenant_id` setting, so these check that a statement always
 * runs under its read's tenant, never under the connection's previous one, and that nothing but
 * a checked uuid is written into the setting.
 */
describe('tenant reader (pipelined, real PostgreSQL)', () => {
  let db: TestDatabase;
  let reader: TenantReader;
  const tenantA = randomUUID();
  const tenantB = randomUUID();
  const idsOf = sql.type(z.object({ id: z.string() }));
  // No tenant filter on purpose: only row-level security keeps the other tenant's rows out.
  const everyEmployee = idsOf`select id from reader_probe order by id`;

  beforeAll(async () => {
    db = await createTestDatabase();
    // A table guarded like every tenant table (the same policy as the read models'), so the
    // test does not depend on a projection's schema.
    for (const statement of [
      sql.unsafe`create table reader_probe (tenant_id uuid not null, id text not null)`,
      sql.unsafe`alter table reader_probe enable row level security`,
      sql.unsafe`alter table reader_probe force row level security`,
      sql.unsafe`create policy reader_probe_tenant on reader_probe using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)`,
      sql.unsafe`grant select, insert, update, delete on reader_probe to eas_tenant`,
      sql.unsafe`insert into reader_probe values (${tenantA}::uuid, 'a1'), (${tenantA}::uuid, 'a2'), (${tenantB}::uuid, 'b1')`,
    ])
      await db.pool.query(statement);
    // One connection: every read reuses the connection the previous tenant left its setting on.
    reader = await createTenantReader(db.url, { maximumPoolSize: 1 });
  });
  afterAll(async () => {
    await reader?.end();
    await db?.drop();
  });

  it('sees only its tenant, read after read, when tenants alternate on one connection', async () => {
    const reads = Array.from({ length: 40 }, (_, i) => (i % 3 === 0 ? tenantB : tenantA));
    const answers = await Promise.all(reads.map((tenant) => reader.read(tenant, (q) => q.any(everyEmployee))));
    answers.forEach((rows, i) => expect(rows.map((r) => r.id)).toEqual(reads[i] === tenantA ? ['a1', 'a2'] : ['b1']));
  });

  it('runs several statements of one read under the same tenant, in order', async () => {
    const [first, second] = await reader.read(tenantB, (q) =>
      Promise.all([q.any(everyEmployee), q.any(idsOf`select current_setting('app.tenant_id') as id`)]),
    );
    expect(first.map((r) => r.id)).toEqual(['b1']);
    expect(second).toEqual([{ id: tenantB }]);
  });

  it('is read-only and keeps working after a statement PostgreSQL refused', async () => {
    await expect(reader.read(tenantA, (q) => q.any(idsOf`delete from reader_probe returning id`))).rejects.toThrow(/read-only/);
    await expect(reader.read(tenantA, (q) => q.any(idsOf`select 1/0 as id`))).rejects.toThrow(/division by zero/);
    expect((await reader.read(tenantA, (q) => q.any(everyEmployee))).map((r) => r.id)).toEqual(['a1', 'a2']);
  });

  it('prepares each statement once, and recovers when a statement failed to parse', async () => {
    const later = idsOf`select id from reader_later order by id`;
    await expect(reader.read(tenantA, (q) => q.any(later))).rejects.toThrow(/does not exist/);
    await db.pool.query(sql.unsafe`create table reader_later (tenant_id uuid not null, id text not null)`);
    await db.pool.query(sql.unsafe`grant select on reader_later to eas_tenant`);
    await db.pool.query(sql.unsafe`insert into reader_later values (${tenantA}::uuid, 'x')`);
    // Same text, same (only) connection slot: it must be parsed again, not bound to a statement
    // that never existed.
    expect(await reader.read(tenantA, (q) => q.any(later))).toEqual([{ id: 'x' }]);
    expect(await reader.read(tenantA, (q) => q.any(later))).toEqual([{ id: 'x' }]);
  });

  it('keeps an exact record of prepared statements when a parse error is caught inside the read', async () => {
    const caught = idsOf`select id from reader_caught order by id`;
    const first = await reader.read(tenantA, (q) => q.any(caught).catch((error: { code?: string }) => error.code));
    expect(first).toBe('42P01');
    await db.pool.query(sql.unsafe`create table reader_caught (tenant_id uuid not null, id text not null)`);
    await db.pool.query(sql.unsafe`grant select on reader_caught to eas_tenant`);
    await db.pool.query(sql.unsafe`insert into reader_caught values (${tenantA}::uuid, 'c')`);
    expect(await reader.read(tenantA, (q) => q.any(caught))).toEqual([{ id: 'c' }]);
  });

  it('recovers when a read is cancelled while its statement waits in Parse (lock wait)', async () => {
    const waiting = idsOf`select id from reader_probe where id <> ${'none'} order by id`;
    const locker = await db.pool.connect(async (connection) => {
      await connection.query(sql.unsafe`begin`);
      await connection.query(sql.unsafe`lock table reader_probe in access exclusive mode`);
      const read = reader
        .read(tenantA, (q) => q.any(waiting))
        .then(
          () => 'answered',
          (error: { code?: string }) => error.code,
        );
      // Cancel the reader's backend once it waits on the lock (in Parse: analysis locks the table).
      const cancelled = await waitFor(async () => {
        const rows = await db.pool.any(sql.type(z.object({ ok: z.boolean() }))`
          select pg_cancel_backend(pid) as ok from pg_stat_activity
          where application_name = 'employee-analytics-reader' and wait_event_type = 'Lock'`);
        return rows.some((r) => r.ok);
      }, 5_000);
      expect(cancelled).toBe(true);
      const outcome = await read;
      await connection.query(sql.unsafe`rollback`);
      return outcome;
    });
    expect(locker).toBe('57014');
    // The same connection slot, the same text: read correctly, not "prepared statement does not exist".
    expect((await reader.read(tenantA, (q) => q.any(waiting))).map((r) => r.id)).toEqual(['a1', 'a2']);
    expect((await reader.read(tenantA, (q) => q.any(waiting))).map((r) => r.id)).toEqual(['a1', 'a2']);
  });

  it('refuses a tenant id that is not a uuid, and scopes the next read right', async () => {
    await expect(reader.read('not-a-uuid', (q) => q.any(everyEmployee))).rejects.toThrow(/not a uuid/);
    expect((await reader.read(tenantB, (q) => q.any(everyEmployee))).map((r) => r.id)).toEqual(['b1']);
  });

  it('writes nothing but a checked uuid into the setting', async () => {
    for (const bad of [`${tenantA}'; reset role; --`, `${tenantB}\u0000`, '', tenantA.replace(/-/g, '')]) {
      await expect(reader.read(bad, (q) => q.any(everyEmployee))).rejects.toThrow(/not a uuid/);
    }
    expect((await reader.read(tenantA.toUpperCase(), (q) => q.any(everyEmployee))).map((r) => r.id)).toEqual(['a1', 'a2']);
  });
});
