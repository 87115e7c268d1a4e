import { describe, expect, it } from 'vitest';
import { evolveVersions, type Version } from '../../../projections/workforce/versions.ts';
import type { EmployeeEvent } from '../../../services/employees/contract.ts';

const employeeId = '01JNGZ0000000000000000000A';
const at = (iso: string) => Date.parse(iso);
const hired: EmployeeEvent = {
  type: 'EmployeeHired',
  data: {
    employeeId,
    email: 'a@x.test',
    firstName: 'Ada',
    lastName: 'L',
    department: 'eng',
    status: 'active',
    hiredAt: '2026-01-01T00:00:00.000Z',
  },
};

/** Given events (each with when it was recorded), the versions as `from..to department status`. */
function given(events: readonly [EmployeeEvent, string][]) {
  const versions = events.reduce<Version[]>((vs, [event, recordedAt]) => evolveVersions(vs, event, at(recordedAt)), []);
  return versions.map(
    (v) =>
      `${new Date(v.validFrom).toISOString().slice(0, 10)}..${v.validTo === null ? '' : new Date(v.validTo).toISOString().slice(0, 10)} ${v.department} ${v.status}${v.previousStatus ? ` (was ${v.previousStatus})` : ''}`,
  );
}

const moved = (department: string): EmployeeEvent => ({ type: 'EmployeeDetailsChanged', data: { employeeId, department } });
const status = (from: 'active' | 'on_leave' | 'inactive', to: 'active' | 'on_leave' | 'inactive', effectiveAt?: string): EmployeeEvent => ({
  type: 'EmployeeStatusChanged',
  data: { employeeId, from, to, reason: null, changedAt: '2026-06-01T00:00:00.000Z', ...(effectiveAt && { effectiveAt }) },
});

describe('employee versions in effective time', () => {
  it('starts with the hire', () => {
    expect(given([[hired, '2026-01-01T00:00:00Z']])).toEqual(['2026-01-01.. eng active']);
  });

  it('splits the version in force when a change is back-dated into it, keeping later changes', () => {
    expect(
      given([
        [hired, '2026-01-01T00:00:00Z'],
        [moved('sales'), '2026-03-01T00:00:00Z'],
        [status('active', 'inactive', '2026-02-01T00:00:00Z'), '2026-06-01T00:00:00Z'],
      ]),
    ).toEqual([
      '2026-01-01..2026-02-01 eng active',
      '2026-02-01..2026-03-01 eng inactive (was active)',
      '2026-03-01.. sales inactive (was inactive)',
    ]);
  });

  it('reads a status change without effectiveAt as effective when recorded', () => {
    expect(
      given([
        [hired, '2026-01-01T00:00:00Z'],
        [status('active', 'on_leave'), '2026-06-01T00:00:00Z'],
      ]),
    ).toEqual(['2026-01-01..2026-06-01 eng active', '2026-06-01.. eng on_leave (was active)']);
  });

  it('applies a change recorded before a future hire date from the hire', () => {
    expect(
      given([
        [hired, '2025-12-01T00:00:00Z'],
        [moved('sales'), '2025-12-15T00:00:00Z'],
      ]),
    ).toEqual(['2026-01-01.. sales active']);
  });

  it('merges versions that no longer differ, and ignores changes to an employee never hired', () => {
    expect(
      given([
        [hired, '2026-01-01T00:00:00Z'],
        [moved('sales'), '2026-02-01T00:00:00Z'],
        [moved('eng'), '2026-02-01T00:00:00Z'],
      ]),
    ).toEqual(['2026-01-01.. eng active']);
    expect(given([[moved('sales'), '2026-02-01T00:00:00Z']])).toEqual([]);
  });
});
