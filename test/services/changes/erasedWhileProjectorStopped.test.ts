import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { START } from '../../../shared/event-store/port.ts';
import { scanChanges } from '../../../projections/changes/queries.ts';
import { erasurePorts } from '../../../services/employees/capability.ts';
import { eraseEmployee } from '../../../services/employees/erasure.ts';
import { testDataKeys } from '../../support/dataKeys.ts';
import { testEmailHash } from '../../support/personalData.ts';
import { createChangesHarness, hire, type ChangesHarness } from '../../support/harness/changes.ts';

/**
 * The changes projector blanks a person's stored changes when it applies their erasure; until
 * then (it lags, or is stopped) the feed must still serve them blank, from the erasure ledger.
 */
type Change = { type: string; employeeId: string; employee: { email: string | null; firstName: string | null; lastName: string | null } };

let h: ChangesHarness;
beforeAll(async () => {
  h = await createChangesHarness();
});
afterAll(async () => {
  await h?.close();
});

describe('when an employee is erased while the changes projector is stopped', () => {
  it("serves every change of theirs with email and names null, and the others' as they are", async () => {
    const { tenant, headers } = await h.tenant();
    const erased = await hire(h.store, tenant.tenantId, 'forgotten');
    await erased.rename('forgotten-1');
    const kept = await hire(h.store, tenant.tenantId, 'kept');
    await h.feedCursors(headers, 3);
    await h.projector.stop();

    const ports = erasurePorts({
      store: h.store,
      log: h.store,
      pool: h.db.pool,
      emailHash: testEmailHash,
      dataKeys: testDataKeys(h.db.pool),
      logInDatabase: true,
    });
    await eraseEmployee(ports, erased.employeeId, { tenantId: tenant.tenantId, actor: 'test', now: new Date().toISOString() });

    const response = await h.app.inject({ method: 'GET', url: '/v1/employees/changes', headers });
    expect(response.statusCode, response.body).toBe(200);
    const changes = response.json<{ data: Change[] }>().data;
    // The projector has not applied the erasure: no `employee.erased` yet, the rows as it left them.
    expect(changes.map((c) => c.type)).toEqual(['employee.hired', 'employee.details_changed', 'employee.hired']);
    for (const change of changes.filter((c) => c.employeeId === erased.employeeId)) {
      expect(change.employee).toMatchObject({ email: null, firstName: null, lastName: null });
    }
    expect(response.body).not.toContain('forgotten');
    expect(changes.find((c) => c.employeeId === kept.employeeId)?.employee).toMatchObject({ firstName: 'kept-0', lastName: 'Test' });

    // And so does the page a webhook run reads.
    const scanned = await scanChanges(h.db.pool, tenant.tenantId, START, ['employee.hired', 'employee.details_changed'], 10, 10);
    expect(JSON.stringify(scanned.changes.map((c) => c.employee))).not.toContain('forgotten');
    expect(scanned.changes).toHaveLength(3);
  });
});
