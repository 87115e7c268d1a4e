import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { monotonicFactory } from 'ulid';
import { changeEmployeeStatus, hireEmployee } from '../../../services/employees/commands.ts';
import { createChangesHarness, type ChangesHarness } from '../../support/harness/changes.ts';
import { waitFor } from '../../support/waitFor.ts';
import { testEmailHash } from '../../support/personalData.ts';

type Page = { data: Array<{ type: string; employee: { status: string } }> };

let h: ChangesHarness;
beforeAll(async () => {
  h = await createChangesHarness();
});
afterAll(async () => {
  await h?.close();
});

const noRoles = async () => undefined;

describe('when a status change is back-dated before the status in force, in a later batch', () => {
  it('the feed shows the employee with the status in force now, as the write side has it', async () => {
    const { tenant, headers } = await h.tenant();
    const ports = { store: h.store, emailHash: testEmailHash, assertRoleExists: noRoles };
    const employeeId = monotonicFactory()();
    const metadata = { tenantId: tenant.tenantId, actor: 'test', now: '2026-04-15T12:00:00.000Z' };
    await hireEmployee(ports, {
      type: 'HireEmployee',
      data: {
        employeeId,
        email: `b-${employeeId.toLowerCase()}@example.test`,
        firstName: 'B',
        lastName: 'Test',
        hiredAt: '2026-01-01T00:00:00.000Z',
      },
      metadata,
    });
    await changeEmployeeStatus(ports, employeeId, metadata, { status: 'on_leave', effectiveAt: '2026-03-01T00:00:00.000Z' });
    const feed = (count: number) =>
      waitFor(async () => {
        const page = (await h.app.inject({ method: 'GET', url: '/v1/employees/changes?limit=100', headers })).json<Page>();
        return page.data.length >= count ? page.data : undefined;
      });
    // Applied before the next change is written: the fold of the next one starts from the stored row.
    await feed(2);
    const result = await changeEmployeeStatus(ports, employeeId, metadata, { status: 'inactive', effectiveAt: '2026-02-15T00:00:00.000Z' });
    expect(result.state.kind === 'hired' && result.state.status).toBe('on_leave');
    const changes = await feed(3);
    expect(changes.map((c) => `${c.type} ${c.employee.status}`)).toEqual([
      'employee.hired active',
      'employee.status_changed on_leave',
      'employee.status_changed on_leave',
    ]);
  });
});
