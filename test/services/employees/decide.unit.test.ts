import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { ConflictError, NotFoundError } from '../../../shared/errors.ts';
import {
  decide,
  employeeDecider,
  STATUS_TRANSITIONS,
  type CommandMetadata,
  type EmployeeCommand,
} from '../../../services/employees/decide.ts';
import { EMPLOYEE_STATUSES, type EmployeeEvent, type EmployeeStatus } from '../../../services/employees/contract.ts';

const metadata: CommandMetadata = { tenantId: '7f1c1f2e-0000-4000-8000-000000000001', actor: 'user-1', now: '2025-03-01T10:00:00.000Z' };
const employeeId = '01JNGZ0000000000000000000A';
const roleId = 'a1b2c3d4-0000-4000-8000-000000000002';

const hired: EmployeeEvent = {
  type: 'EmployeeHired',
  data: {
    employeeId,
    email: 'Ada@Example.com',
    firstName: 'Ada',
    lastName: 'Lovelace',
    department: 'engineering',
    status: 'active',
    hiredAt: '2024-01-02T09:00:00.000Z',
  },
};

const statusChanged = (from: EmployeeStatus, to: EmployeeStatus): EmployeeEvent => ({
  type: 'EmployeeStatusChanged',
  data: { employeeId, from, to, reason: null, changedAt: metadata.now },
});

/** Events that leave a hired employee in `status`. */
function historyIn(status: EmployeeStatus): EmployeeEvent[] {
  if (status === 'active') return [hired];
  return [hired, statusChanged('active', status)];
}

/** Given events, when command: the events decided (or the error thrown). */
function given(events: readonly EmployeeEvent[]) {
  const state = events.reduce(employeeDecider.evolve, employeeDecider.initialState);
  return { when: (command: EmployeeCommand) => () => decide(command, state) };
}

const hire = (data: Partial<Extract<EmployeeCommand, { type: 'HireEmployee' }>['data']> = {}): EmployeeCommand => ({
  type: 'HireEmployee',
  data: { employeeId, email: 'Ada@Example.com', firstName: 'Ada', lastName: 'Lovelace', department: 'engineering', ...data },
  metadata,
});

describe('HireEmployee', () => {
  describe('when the employee does not exist', () => {
    it('hires them as active, hired now', () => {
      expect(given([]).when(hire({ hiredAt: undefined }))()).toEqual([{ ...hired, data: { ...hired.data, hiredAt: metadata.now } }]);
    });

    it('keeps an imported hiredAt', () => {
      expect(given([]).when(hire({ hiredAt: '2024-01-02T09:00:00.000Z' }))()).toEqual([hired]);
    });

    it('records a missing department as null', () => {
      const [event] = given([]).when(hire({ department: undefined, hiredAt: '2024-01-02T09:00:00.000Z' }))();
      expect(event).toEqual({ ...hired, data: { ...hired.data, department: null } });
    });

    it('assigns the role in a second event when a roleId is given', () => {
      expect(given([]).when(hire({ roleId, hiredAt: '2024-01-02T09:00:00.000Z' }))()).toEqual([
        hired,
        { type: 'EmployeeRoleAssigned', data: { employeeId, roleId } },
      ]);
    });
  });

  describe('when the employee already exists', () => {
    it('refuses with a conflict', () => {
      expect(given([hired]).when(hire())).toThrow(ConflictError);
    });
  });
});

describe('ChangeEmployeeDetails', () => {
  const change = (data: Extract<EmployeeCommand, { type: 'ChangeEmployeeDetails' }>['data']): EmployeeCommand => ({
    type: 'ChangeEmployeeDetails',
    data,
    metadata,
  });

  describe('when the employee exists', () => {
    it('records only the fields that change', () => {
      expect(given([hired]).when(change({ firstName: 'Augusta', lastName: 'Lovelace', department: 'research' }))()).toEqual([
        { type: 'EmployeeDetailsChanged', data: { employeeId, firstName: 'Augusta', department: 'research' } },
      ]);
    });

    it('can clear the department', () => {
      expect(given([hired]).when(change({ department: null }))()).toEqual([
        { type: 'EmployeeDetailsChanged', data: { employeeId, department: null } },
      ]);
    });

    it('records an email change with the previous address', () => {
      expect(given([hired]).when(change({ email: 'ada@lovelace.org' }))()).toEqual([
        { type: 'EmployeeEmailChanged', data: { employeeId, email: 'ada@lovelace.org', previousEmail: 'Ada@Example.com' } },
      ]);
    });

    it('records details and email together', () => {
      expect(given([hired]).when(change({ lastName: 'King', email: 'ada@king.org' }))()).toEqual([
        { type: 'EmployeeDetailsChanged', data: { employeeId, lastName: 'King' } },
        { type: 'EmployeeEmailChanged', data: { employeeId, email: 'ada@king.org', previousEmail: 'Ada@Example.com' } },
      ]);
    });

    it('decides nothing when nothing changes', () => {
      expect(given([hired]).when(change({ firstName: 'Ada', email: 'Ada@Example.com' }))()).toEqual([]);
    });

    it('folds earlier changes before comparing', () => {
      const earlier: EmployeeEvent = { type: 'EmployeeDetailsChanged', data: { employeeId, firstName: 'Augusta' } };
      expect(given([hired, earlier]).when(change({ firstName: 'Augusta' }))()).toEqual([]);
    });
  });

  describe('when the employee does not exist', () => {
    it('refuses with not found', () => {
      expect(given([]).when(change({ firstName: 'X' }))).toThrow(NotFoundError);
    });
  });
});

describe('ChangeEmployeeStatus', () => {
  const changeTo = (status: EmployeeStatus, reason?: string): EmployeeCommand => ({
    type: 'ChangeEmployeeStatus',
    data: { status, ...(reason !== undefined && { reason }) },
    metadata,
  });

  const allowed: Array<[EmployeeStatus, EmployeeStatus]> = [
    ['active', 'on_leave'],
    ['on_leave', 'active'],
    ['active', 'inactive'],
    ['on_leave', 'inactive'],
    ['inactive', 'active'],
  ];
  const refused: Array<[EmployeeStatus, EmployeeStatus]> = [
    ['active', 'active'],
    ['on_leave', 'on_leave'],
    ['inactive', 'inactive'],
    ['inactive', 'on_leave'],
  ];

  it('covers every pair of statuses', () => {
    expect(allowed.length + refused.length).toBe(EMPLOYEE_STATUSES.length ** 2);
  });

  for (const [from, to] of allowed) {
    describe(`when the employee is ${from}`, () => {
      it(`moves to ${to}`, () => {
        expect(given(historyIn(from)).when(changeTo(to, 'because'))()).toEqual([
          {
            type: 'EmployeeStatusChanged',
            data: { employeeId, from, to, reason: 'because', changedAt: metadata.now, effectiveAt: metadata.now },
          },
        ]);
      });
    });
  }

  for (const [from, to] of refused) {
    describe(`when the employee is ${from}`, () => {
      it(`refuses to move to ${to} with a conflict`, () => {
        expect(given(historyIn(from)).when(changeTo(to))).toThrow(ConflictError);
      });
    });
  }

  describe('when the employee was rehired', () => {
    it('follows the rules from the current status', () => {
      const history = [hired, statusChanged('active', 'inactive'), statusChanged('inactive', 'active')];
      expect(given(history).when(changeTo('on_leave'))()).toHaveLength(1);
    });
  });

  describe('when the employee does not exist', () => {
    it('refuses with not found', () => {
      expect(given([]).when(changeTo('inactive'))).toThrow(NotFoundError);
    });
  });

  it('agrees with the transition table for any walk (property)', () => {
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...EMPLOYEE_STATUSES), { maxLength: 30 }), (targets) => {
        let events: EmployeeEvent[] = [hired];
        let current: EmployeeStatus = 'active';
        for (const to of targets) {
          const attempt = given(events).when(changeTo(to));
          if (STATUS_TRANSITIONS[current].includes(to)) {
            events = [...events, ...attempt()];
            current = to;
          } else {
            expect(attempt).toThrow(ConflictError);
          }
        }
        const state = events.reduce(employeeDecider.evolve, employeeDecider.initialState);
        expect(state.kind === 'hired' && state.status).toBe(current);
      }),
    );
  });
});

describe('AssignEmployeeRole', () => {
  const assign = (id: string): EmployeeCommand => ({ type: 'AssignEmployeeRole', data: { roleId: id }, metadata });

  describe('when the employee exists', () => {
    it('assigns the role', () => {
      expect(given([hired]).when(assign(roleId))()).toEqual([{ type: 'EmployeeRoleAssigned', data: { employeeId, roleId } }]);
    });

    it('records the assignment again when the stream already names the role (the user may have been changed since)', () => {
      const assigned: EmployeeEvent = { type: 'EmployeeRoleAssigned', data: { employeeId, roleId } };
      expect(given([hired, assigned]).when(assign(roleId))()).toEqual([{ type: 'EmployeeRoleAssigned', data: { employeeId, roleId } }]);
    });
  });

  describe('when the employee does not exist', () => {
    it('refuses with not found', () => {
      expect(given([]).when(assign(roleId))).toThrow(NotFoundError);
    });
  });
});
