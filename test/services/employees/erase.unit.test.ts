import { describe, expect, it } from 'vitest';
import { ErasedError, NotFoundError } from '../../../shared/errors.ts';
import { decide, employeeDecider, type CommandMetadata, type EmployeeCommand } from '../../../services/employees/decide.ts';
import type { EmployeeEvent } from '../../../services/employees/contract.ts';

const metadata: CommandMetadata = { tenantId: '7f1c1f2e-0000-4000-8000-000000000001', actor: 'user-1', now: '2025-03-01T10:00:00.000Z' };
const later: CommandMetadata = { ...metadata, now: '2025-04-01T10:00:00.000Z' };
const employeeId = '01JNGZ0000000000000000000A';

const hired: EmployeeEvent = {
  type: 'EmployeeHired',
  data: {
    employeeId,
    email: 'ada@example.com',
    firstName: 'Ada',
    lastName: 'Lovelace',
    department: 'engineering',
    status: 'active',
    hiredAt: '2024-01-02T09:00:00.000Z',
  },
};
const erased: EmployeeEvent = { type: 'EmployeeErased', data: { employeeId, erasedAt: metadata.now } };

function given(events: readonly EmployeeEvent[]) {
  const state = events.reduce(employeeDecider.evolve, employeeDecider.initialState);
  return { state, when: (command: EmployeeCommand) => () => decide(command, state) };
}

const erase = (m: CommandMetadata = metadata): EmployeeCommand => ({ type: 'EraseEmployee', data: {}, metadata: m });

describe('EraseEmployee', () => {
  describe('when the employee is hired', () => {
    it('records EmployeeErased at the command time', () => {
      expect(given([hired]).when(erase())()).toEqual([erased]);
    });
  });

  describe('when the employee was erased already', () => {
    it('records nothing more, and the first erasedAt stands', () => {
      const { state, when } = given([hired, erased]);
      expect(when(erase(later))()).toEqual([]);
      expect(state).toMatchObject({ kind: 'erased', erasedAt: metadata.now });
    });
  });

  describe('when there is no such employee', () => {
    it('is not found', () => {
      expect(given([]).when(erase())).toThrow(NotFoundError);
    });
  });
});

describe('after an erasure', () => {
  const after = given([
    hired,
    { type: 'EmployeeStatusChanged', data: { employeeId, from: 'active', to: 'on_leave', reason: null, changedAt: metadata.now } },
    erased,
  ]);

  it('keeps what is not personal and nothing that is', () => {
    expect(after.state).toEqual({
      kind: 'erased',
      id: employeeId,
      department: 'engineering',
      status: 'on_leave',
      hiredAt: '2024-01-02T09:00:00.000Z',
      statusSince: metadata.now,
      erasedAt: metadata.now,
    });
  });

  it.each<EmployeeCommand>([
    { type: 'ChangeEmployeeDetails', data: { firstName: 'Back' }, metadata: later },
    { type: 'ChangeEmployeeDetails', data: { email: 'back@example.com' }, metadata: later },
    { type: 'ChangeEmployeeStatus', data: { status: 'active' }, metadata: later },
    { type: 'AssignEmployeeRole', data: { roleId: 'a1b2c3d4-0000-4000-8000-000000000002' }, metadata: later },
  ])('refuses $type as gone (410), naming when', (command) => {
    expect(after.when(command)).toThrow(ErasedError);
    try {
      after.when(command)();
    } catch (error) {
      expect(error).toMatchObject({ status: 410, code: 'erased', extras: { erasedAt: metadata.now } });
    }
  });

  it('refuses a hire under the same id', () => {
    expect(after.when({ type: 'HireEmployee', data: { ...hired.data, email: 'x@example.com' }, metadata: later })).toThrow(
      /already exists/,
    );
  });
});
