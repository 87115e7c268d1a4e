import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { ValueExpression } from 'slonik';
import { sql, type DatabasePool, type DatabaseTransactionConnection } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { START, type EventStore } from '../../../shared/event-store/port.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import { changesProjection } from '../../../projections/changes/changesProjection.ts';
import { readChanges, scanChanges } from '../../../projections/changes/queries.ts';
import { acquireLease } from '../../../services/webhooks/lease.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { provisionTenant, type TestTenant } from '../../support/auth.ts';

/**
 * Regression: reads of the change feed made as the tenant role (row-level security) looked the
 * cursor up by its log position, a numeric comparison, which PostgreSQL keeps off the index below
 * a policy (numeric operators are not leakproof): every page, every webhook run's scan and every
 * lease check of a sibling endpoint read all of the tenant's changes. Counted here is what
 * PostgreSQL itself reports its scans of the table and its indexes returned in the read's
 * transaction, for a cursor near the end of a long feed.
 */
const CHANGES = 5_000;
let db: TestDatabase;
let store: EventStore;
let tenant: TestTenant;

/** `db.pool`, recording the rows each transaction read from `employee_changes`, as PostgreSQL counts them. */
function counting(pool: DatabasePool): { readonly pool: DatabasePool; readonly reads: number[] } {
  const reads: number[] = [];
  const rowsRead = sql.type(z.object({ n: z.number() }))`
    select coalesce(sum(pg_stat_get_xact_tuples_returned(r)), 0)::int as n
    from (select 'employee_changes'::regclass::oid as r
          union all select indexrelid from pg_index where indrelid = 'employee_changes'::regclass) scanned`;
  const transaction = <T>(work: (tx: DatabaseTransactionConnection) => Promise<T>): Promise<T> =>
    pool.transaction(async (tx) => {
      // Before and after: the view also holds what earlier transactions of the connection read
      // while their counts wait to be flushed to the statistics (at most once a second).
      const before = await tx.oneFirst(rowsRead);
      const result = await work(tx);
      reads.push((await tx.oneFirst(rowsRead)) - before);
      return result;
    });
  return { pool: Object.assign(Object.create(pool) as DatabasePool, { transaction }), reads };
}

/** The tenant's changes as the projection stores them: one hire each, in log order. */
async function fill(tenantId: string, from: number): Promise<void> {
  const employee = (i: ValueExpression) => sql.fragment`jsonb_build_object('id', 'e-' || ${i}, 'email', null, 'firstName', 'N' || ${i},
    'lastName', null, 'department', null, 'status', 'active', 'hiredAt', '2026-01-01T00:00:00.000Z')`;
  await db.pool.query(sql.unsafe`
    insert into employee_changes (tenant_id, commit_position, prepare_position, employee_id, revision, type, occurred_at, employee, status_since)
    select ${tenantId}, i, i, 'e-' || i, 0, 'employee.hired', now(), ${employee(sql.fragment`i::text`)}, now()
    from generate_series(${from}::int, ${from + CHANGES - 1}::int) i
    order by i
  `);
}

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  await replayProjection(db.pool, store, changesProjection);
  tenant = await provisionTenant(db.pool);
  // Another tenant's changes between: a tenant's rows are not the whole table.
  await fill(tenant.tenantId, 1);
  await fill((await provisionTenant(db.pool)).tenantId, CHANGES + 1);
  await fill(tenant.tenantId, 2 * CHANGES + 1);
  await db.pool.query(sql.unsafe`analyze employee_changes`);
}, 60_000);
afterAll(async () => {
  await store?.close();
  await db?.drop();
});

/** Near the end of the tenant's feed: ten changes after it. */
const nearEnd = () => ({ commit: BigInt(3 * CHANGES - 10), prepare: BigInt(3 * CHANGES - 10) });

describe('a read of the change feed as the tenant, after a cursor near the end of a long feed', () => {
  it('reads the changes after the cursor, not the whole feed', async () => {
    const { pool, reads } = counting(db.pool);
    const page = await readChanges(pool, tenant.tenantId, nearEnd(), 100);
    expect(page.known).toBe(true);
    expect(page.changes.map((c) => c.employee.firstName)).toEqual(Array.from({ length: 10 }, (_, i) => `N${3 * CHANGES - 9 + i}`));
    expect(reads).toHaveLength(1);
    expect(reads[0]).toBeLessThan(50);
  });

  it('reads the first page from the start, not the whole feed', async () => {
    const { pool, reads } = counting(db.pool);
    const page = await readChanges(pool, tenant.tenantId, START, 100);
    expect(page.changes.map((c) => c.employee.firstName)).toEqual(Array.from({ length: 100 }, (_, i) => `N${i + 1}`));
    expect(reads[0]).toBeLessThan(150);
  });

  it('answers a cursor of another tenant’s as unknown without looking for the changes after it', async () => {
    const { pool, reads } = counting(db.pool);
    const page = await readChanges(pool, tenant.tenantId, { commit: BigInt(CHANGES + 5), prepare: BigInt(CHANGES + 5) }, 100);
    expect([page.known, page.changes]).toEqual([false, []]);
    expect(reads).toHaveLength(1);
    expect(reads[0]).toBeLessThan(50);
  });

  it('scans a webhook run’s window after the cursor only', async () => {
    const { pool, reads } = counting(db.pool);
    const scanned = await scanChanges(pool, tenant.tenantId, nearEnd(), ['employee.hired'], 100, 1_000);
    expect(scanned.changes).toHaveLength(10);
    expect(scanned.scannedTo).toEqual({ commit: BigInt(3 * CHANGES), prepare: BigInt(3 * CHANGES) });
    expect(reads[0]).toBeLessThan(50);
  });

  it('finds nothing after a gone cursor with no later change without reading the feed', async () => {
    // A webhook endpoint's cursor whose change a rebuild parked, the newest of the tenant's.
    const gone = { commit: BigInt(3 * CHANGES + 100), prepare: BigInt(3 * CHANGES + 100) };
    const { pool, reads } = counting(db.pool);
    const scanned = await scanChanges(pool, tenant.tenantId, gone, ['employee.hired'], 100, 1_000);
    expect([scanned.changes, scanned.scannedTo]).toEqual([[], null]);
    expect(reads[0]).toBeLessThan(50);
  });

  it('checks a sibling endpoint’s due changes from its cursor when a lease is asked for', async () => {
    const endpoint = async (createdAt: string) => {
      const id = randomUUID();
      await db.pool.query(sql.unsafe`
        insert into webhook_endpoints (id, tenant_id, url, event_types, secret_sealed, created_at, cursor_commit, cursor_prepare)
        values (${id}, ${tenant.tenantId}, 'https://receiver.test/hook', ${sql.array(['employee.hired'], 'text')}, 'sealed',
          ${createdAt}, ${nearEnd().commit.toString()}, ${nearEnd().prepare.toString()})`);
      return id;
    };
    await endpoint('2026-01-01T00:00:00Z');
    const later = await endpoint('2026-01-02T00:00:00Z');
    const { pool, reads } = counting(db.pool);
    // One lease for the tenant: the sibling registered first, due as well, goes first.
    expect(await acquireLease(pool, tenant.tenantId, later, randomUUID(), 10_000, 1)).toBeNull();
    expect(reads[0]).toBeLessThan(50);
  });
});
