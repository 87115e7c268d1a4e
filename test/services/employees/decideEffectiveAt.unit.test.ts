import { describe, expect, it } from 'vitest';
import { BadRequestError } from '../../../shared/errors.ts';
import { decide, employeeDecider, type CommandMetadata, type EmployeeCommand } from '../../../services/employees/decide.ts';
import type { EmployeeEvent, EmployeeStatus } from '../../../services/employees/contract.ts';

const metadata: CommandMetadata = { tenantId: '7f1c1f2e-0000-4000-8000-000000000001', actor: 'user-1', now: '2025-03-01T10:00:00.000Z' };
const employeeId = '01JNGZ0000000000000000000A';
const HIRED_AT = '2024-01-02T09:00:00.000Z';

const hired: EmployeeEvent = {
  type: 'EmployeeHired',
  data: {
    employeeId,
    email: 'ada@example.com',
    firstName: 'Ada',
    lastName: 'Lovelace',
    department: 'engineering',
    status: 'active',
    hiredAt: HIRED_AT,
  },
};

function given(events: readonly EmployeeEvent[]) {
  const state = events.reduce(employeeDecider.evolve, employeeDecider.initialState);
  return { when: (command: EmployeeCommand) => () => decide(command, state) };
}

const changeTo = (status: EmployeeStatus, effectiveAt?: string): EmployeeCommand => ({
  type: 'ChangeEmployeeStatus',
  data: { status, ...(effectiveAt !== undefined && { effectiveAt }) },
  metadata,
});

const refusal = (run: () => unknown): BadRequestError => {
  try {
    run();
  } catch (error) {
    if (error instanceof BadRequestError) return error;
    throw error;
  }
  throw new Error('expected a 400');
};

describe('ChangeEmployeeStatus with an effective date', () => {
  describe('when the employee is active', () => {
    it('records the effective date it was given, and when it was recorded', () => {
      expect(given([hired]).when(changeTo('inactive', '2024-06-30T00:00:00.000Z'))()).toEqual([
        {
          type: 'EmployeeStatusChanged',
          data: {
            employeeId,
            from: 'active',
            to: 'inactive',
            reason: null,
            changedAt: metadata.now,
            effectiveAt: '2024-06-30T00:00:00.000Z',
          },
        },
      ]);
    });

    it('takes effect now when no date is given', () => {
      const [event] = given([hired]).when(changeTo('on_leave'))();
      expect(event?.type === 'EmployeeStatusChanged' && event.data.effectiveAt).toBe(metadata.now);
    });

    it('accepts the hire instant itself and now itself', () => {
      expect(given([hired]).when(changeTo('inactive', HIRED_AT))()).toHaveLength(1);
      expect(given([hired]).when(changeTo('inactive', metadata.now))()).toHaveLength(1);
    });

    it('refuses a date in the future with a 400 naming effectiveAt', () => {
      const error = refusal(given([hired]).when(changeTo('inactive', '2025-03-01T10:00:00.001Z')));
      expect(error.status).toBe(400);
      expect(error.extras).toEqual({ errors: [{ path: 'body.effectiveAt', message: 'must not be in the future' }] });
    });

    it('refuses a date before the hire', () => {
      const error = refusal(given([hired]).when(changeTo('inactive', '2024-01-02T08:59:59.999Z')));
      expect(error.message).toMatch(/before the hire date/);
    });
  });

  describe('when the current status took effect on a given day', () => {
    const leave: EmployeeEvent = {
      type: 'EmployeeStatusChanged',
      data: { employeeId, from: 'active', to: 'on_leave', reason: null, changedAt: metadata.now, effectiveAt: '2024-09-01T00:00:00.000Z' },
    };

    it('accepts a later change back-dated to after that day', () => {
      expect(given([hired, leave]).when(changeTo('inactive', '2024-10-01T00:00:00.000Z'))()).toHaveLength(1);
    });

    it('refuses a change that would take effect before it', () => {
      const error = refusal(given([hired, leave]).when(changeTo('inactive', '2024-08-31T23:59:59.999Z')));
      expect(error.message).toMatch(/before the current status took effect \(2024-09-01T00:00:00.000Z\)/);
    });
  });

  describe('when the last change was recorded before effective dates existed', () => {
    // Such an event has no effectiveAt: it took effect when it was recorded (changedAt).
    const legacy = {
      type: 'EmployeeStatusChanged',
      data: { employeeId, from: 'active', to: 'on_leave', reason: null, changedAt: '2024-11-15T12:00:00.000Z' },
    } satisfies EmployeeEvent;

    it('reads it as effective when it was recorded', () => {
      const state = [hired, legacy].reduce(employeeDecider.evolve, employeeDecider.initialState);
      expect(state.kind === 'hired' && state.statusSince).toBe('2024-11-15T12:00:00.000Z');
      expect(refusal(given([hired, legacy]).when(changeTo('active', '2024-11-15T11:59:59.999Z'))).status).toBe(400);
      expect(given([hired, legacy]).when(changeTo('active', '2024-11-15T12:00:00.000Z'))()).toHaveLength(1);
    });
  });
});
