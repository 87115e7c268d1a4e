import { monotonicFactory } from 'ulid';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql } from '../../../shared/db/pool.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { runProjection } from '../../../shared/projections/follow.ts';
import { employeesProjection } from '../../../projections/employees/employeesProjection.ts';
import { listEmployees } from '../../../projections/employees/queries.ts';
import { listEmployeesAsOf } from '../../../projections/workforce/asOf.ts';
import { workforceProjection } from '../../../projections/workforce/workforceProjection.ts';
import { erasurePorts } from '../../../services/employees/capability.ts';
import { hireEmployee } from '../../../services/employees/commands.ts';
import { eraseEmployee } from '../../../services/employees/erasure.ts';
import { provisionTenant } from '../../support/auth.ts';
import { testEmailHash, useSealedTestEventStore } from '../../support/personalData.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * A projector takes an erased person out of its read model when it applies the erasure, which
 * may lag, be stopped, or wait behind a parked event of theirs. The lists read the erasure ledger
 * as well, so from the erasure's commit neither the directory nor its as-of view shows them.
 */
const nextId = monotonicFactory();
const t = useSealedTestEventStore();

async function hired(tenantId: string, lastName: string): Promise<string> {
  const employeeId = nextId();
  await hireEmployee(
    { store: t.store, emailHash: testEmailHash, assertRoleExists: async () => undefined },
    {
      type: 'HireEmployee',
      data: { employeeId, email: `${lastName.toLowerCase()}-${employeeId}@lists.test`, firstName: 'Ada', lastName },
      metadata: { tenantId, actor: 'spec', now: new Date().toISOString() },
    },
  );
  return employeeId;
}

/** How many rows of the read model's table still hold the person's name. */
const rowsNaming = (table: 'employees' | 'employee_versions', lastName: string) =>
  t.db.pool.oneFirst(sql.type(z.object({ n: z.number() }))`
    select count(*)::int as n from ${sql.identifier([table])} where last_name = ${lastName}
  `);

describe('when an employee is erased while the projectors have not applied it', () => {
  it('leaves them out of the list and of the as-of list at once', async () => {
    const { tenantId } = await provisionTenant(t.db.pool);
    const gone = await hired(tenantId, 'Forgotten');
    const kept = await hired(tenantId, 'Kept');
    const projectors = [
      runProjection(t.db.pool, t.store, employeesProjection, { pollIntervalMs: 50 }),
      runProjection(t.db.pool, t.store, workforceProjection, { pollIntervalMs: 50 }),
    ];
    for (const p of [employeesProjection, workforceProjection]) await waitFor(() => readCheckpoint(t.db.pool, p.name));
    const page = { page: 1, limit: 10 };
    await waitFor(async () => (await listEmployees(t.db.pool, tenantId, page)).data.length === 2);
    await waitFor(async () => (await listEmployeesAsOf(t.db.pool, tenantId, { ...page, asOf: Date.now() })).data.length === 2);
    await Promise.all(projectors.map((p) => p.stop()));

    const ports = erasurePorts({
      store: t.store,
      log: t.store,
      pool: t.db.pool,
      emailHash: testEmailHash,
      dataKeys: t.keys,
      logInDatabase: true,
    });
    await eraseEmployee(ports, gone, { tenantId, actor: 'spec', now: new Date().toISOString() });

    // The read models still hold them, as the stopped projectors left them.
    expect(await rowsNaming('employees', 'Forgotten')).toBe(1);
    expect(await rowsNaming('employee_versions', 'Forgotten')).toBe(1);
    const list = await listEmployees(t.db.pool, tenantId, page);
    expect(list.data.map((e) => e.id)).toEqual([kept]);
    const asOf = await listEmployeesAsOf(t.db.pool, tenantId, { ...page, asOf: Date.now() });
    expect(asOf.data.map((e) => e.id)).toEqual([kept]);
    expect(JSON.stringify([list.data, asOf.data])).not.toContain('Forgotten');
  });
});
