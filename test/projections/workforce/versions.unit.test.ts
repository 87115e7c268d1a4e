import { describe, expect, it } from 'vitest';
import { contributions, evolveVersions, type Contribution, type Version } from '../../../projections/workforce/versions.ts';
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
function given(events: readonly (readonly [EmployeeEvent, string])[]) {
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
    ).toEqual(['2026-01-01..2026-02-01 eng active', '2026-02-01..2026-03-01 eng inactive (was active)', '2026-03-01.. sales inactive']);
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

  it('keeps a later status change when one is back-dated before it', () => {
    // On leave since 1 March, then recorded as having left on 15 February: inactive from 15
    // February until the leave, which took effect later and is still in force.
    expect(
      given([
        [hired, '2026-01-01T00:00:00Z'],
        [status('active', 'on_leave', '2026-03-01T00:00:00Z'), '2026-03-01T00:00:00Z'],
        [status('active', 'inactive', '2026-02-15T00:00:00Z'), '2026-06-01T00:00:00Z'],
      ]),
    ).toEqual([
      '2026-01-01..2026-02-15 eng active',
      '2026-02-15..2026-03-01 eng inactive (was active)',
      '2026-03-01.. eng on_leave (was inactive)',
    ]);
  });

  it('moves an exit earlier, keeping the later one as a change that changes nothing, and counts one exit', () => {
    const versions = [
      [hired, '2026-01-01T00:00:00Z'],
      [status('active', 'inactive', '2026-02-15T00:00:00Z'), '2026-02-15T00:00:00Z'],
      [status('active', 'inactive', '2026-02-10T00:00:00Z'), '2026-06-01T00:00:00Z'],
    ] as const;
    expect(given(versions)).toEqual([
      '2026-01-01..2026-02-10 eng active',
      '2026-02-10..2026-02-15 eng inactive (was active)',
      '2026-02-15.. eng inactive (was inactive)',
    ]);
    expect(countsOf(versions)).toEqual({ hires: { '2026-01-01': 1 }, exits: { '2026-02-10': 1 } });
  });

  it('lets a change back-dated before a no-op status change stop there', () => {
    // Inactive from 10 February (the 15 February exit a no-op), then back on leave from 12
    // February: the 15 February change is in force again from its own date.
    expect(
      given([
        [hired, '2026-01-01T00:00:00Z'],
        [status('active', 'inactive', '2026-02-15T00:00:00Z'), '2026-02-15T00:00:00Z'],
        [status('active', 'inactive', '2026-02-10T00:00:00Z'), '2026-06-01T00:00:00Z'],
        [status('inactive', 'active', '2026-02-12T00:00:00Z'), '2026-06-02T00:00:00Z'],
      ]),
    ).toEqual([
      '2026-01-01..2026-02-10 eng active',
      '2026-02-10..2026-02-12 eng inactive (was active)',
      '2026-02-12..2026-02-15 eng active (was inactive)',
      '2026-02-15.. eng inactive (was active)',
    ]);
  });

  it('lets the later recorded of two changes at the same instant win', () => {
    expect(
      given([
        [hired, '2026-01-01T00:00:00Z'],
        [status('active', 'on_leave', '2026-03-01T00:00:00Z'), '2026-03-01T00:00:00Z'],
        [status('active', 'inactive', '2026-03-01T00:00:00Z'), '2026-06-01T00:00:00Z'],
      ]),
    ).toEqual(['2026-01-01..2026-03-01 eng active', '2026-03-01.. eng inactive (was active)']);
  });

  it('counts an exit at the hire instant as a hire and an exit, and never in the headcount', () => {
    const versions = [
      [hired, '2026-01-01T00:00:00Z'],
      [status('active', 'inactive', '2026-01-01T00:00:00Z'), '2026-01-02T00:00:00Z'],
    ] as const;
    expect(given(versions)).toEqual(['2026-01-01.. eng inactive']);
    expect(countsOf(versions)).toEqual({ hires: { '2026-01-01': 1 }, exits: { '2026-01-01': 1 } });
  });
});

/** Hires and exits per day that the final versions add to the counters. */
function countsOf(events: readonly (readonly [EmployeeEvent, string])[]) {
  const versions = events.reduce<Version[]>((vs, [event, recordedAt]) => evolveVersions(vs, event, at(recordedAt)), []);
  const into = new Map<string, Contribution>();
  contributions('t', versions, 1, into);
  const per = (what: 'hires' | 'exits') => Object.fromEntries([...into.values()].filter((c) => c[what] !== 0).map((c) => [c.day, c[what]]));
  return { hires: per('hires'), exits: per('exits') };
}
