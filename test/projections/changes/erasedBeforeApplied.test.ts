import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { comparePositions, type EventStore } from '../../../shared/event-store/port.ts';
import type { DataKeyStore } from '../../../shared/personal-data/dataKeys.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { runProjection } from '../../../shared/projections/follow.ts';
import { changesProjection } from '../../../projections/changes/changesProjection.ts';
import { erasurePorts } from '../../../services/employees/capability.ts';
import { changeEmployeeDetails } from '../../../services/employees/commands.ts';
import { eraseEmployee } from '../../../services/employees/erasure.ts';
import { provisionTenant } from '../../support/auth.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { hire } from '../../support/harness/changes.ts';
import { sealedEventStore, testEmailHash } from '../../support/personalData.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * The change feed's projector lags behind (or was stopped) while an employee's address changes
 * and the employee is erased: it meets the address change only after the key is gone, so that
 * event opens with its own personal fields null while the names the fold carries from the
 * earlier rows are still plain.
 */
let db: TestDatabase;
let store: EventStore;
let keys: DataKeyStore;

beforeAll(async () => {
  db = await createTestDatabase();
  ({ store, keys } = sealedEventStore(createPostgresEventStore(db.pool), db.pool));
});
afterAll(async () => {
  await store?.close();
  await db?.drop();
});

const feedRows = z.object({ type: z.string(), employee: z.record(z.string(), z.unknown()) });

/** Runs the changes projector until it has applied the whole log, then stops it. */
async function catchUp(): Promise<void> {
  const head = await store.headPosition();
  const projector = runProjection(db.pool, store, changesProjection, { pollIntervalMs: 50 });
  try {
    await waitFor(async () => {
      const at = await readCheckpoint(db.pool, changesProjection.name);
      return at !== null && comparePositions(at.position, head) >= 0 ? true : undefined;
    });
  } finally {
    await projector.stop();
  }
}

describe("when the changes projector meets an erased employee's address change after the erasure", () => {
  it('writes no row with the names, and every row of the person ends blank', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const { employeeId } = await hire(store, tenantId, 'Lagging');
    await catchUp();
    const metadata = { tenantId, actor: 'test', now: new Date().toISOString() };
    await changeEmployeeDetails({ store, assertRoleExists: async () => undefined, emailHash: testEmailHash }, employeeId, {
      type: 'ChangeEmployeeDetails',
      data: { email: `moved-${employeeId.toLowerCase()}@example.test` },
      metadata,
    });
    const ports = erasurePorts({ store, log: store, pool: db.pool, emailHash: testEmailHash, dataKeys: keys, logInDatabase: true });
    await eraseEmployee(ports, employeeId, metadata);
    await catchUp();

    const rows = await db.pool.any(sql.type(feedRows)`
      select type, employee from employee_changes where tenant_id = ${tenantId} and employee_id = ${employeeId} order by seq
    `);
    expect(rows.map((r) => r.type)).toEqual(['employee.hired', 'employee.email_changed', 'employee.erased']);
    for (const row of rows.slice(0, 2)) expect(row.employee).toMatchObject({ email: null, firstName: null, lastName: null });
    const dump = JSON.stringify(rows);
    expect(dump).not.toContain('Lagging');
    expect(dump).not.toContain(employeeId.toLowerCase());
  });
});
