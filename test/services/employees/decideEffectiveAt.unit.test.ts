import { describe, expect, it } from 'vitest';
import { BadRequestError, ConflictError } from '../../../shared/errors.ts';
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
    const fromOf = (events: EmployeeEvent[]) => events.map((e) => (e.type === 'EmployeeStatusChanged' ? e.data.from : undefined));

    it('accepts a later change back-dated to after that day', () => {
      expect(fromOf(given([hired, leave]).when(changeTo('inactive', '2024-10-01T00:00:00.000Z'))())).toEqual(['on_leave']);
    });

    it('accepts a change back-dated before it, as a change from the status in force then, and keeps the later status current', () => {
      const events = given([hired, leave]).when(changeTo('inactive', '2024-08-15T00:00:00.000Z'))();
      expect(fromOf(events)).toEqual(['active']);
      const state = [hired, leave, ...events].reduce(employeeDecider.evolve, employeeDecider.initialState);
      expect(state.kind === 'hired' && [state.status, state.statusSince]).toEqual(['on_leave', '2024-09-01T00:00:00.000Z']);
    });

    it('checks a back-dated change against the status in force when it takes effect', () => {
      // active → active is no transition, even though the status in force now is on_leave.
      expect(() => given([hired, leave]).when(changeTo('active', '2024-08-15T00:00:00.000Z'))()).toThrow(ConflictError);
    });
  });

  describe('when an exit is recorded and then found to have happened earlier', () => {
    const exit: EmployeeEvent = {
      type: 'EmployeeStatusChanged',
      data: { employeeId, from: 'active', to: 'inactive', reason: null, changedAt: metadata.now, effectiveAt: '2024-10-01T00:00:00.000Z' },
    };

    it('accepts a second exit effective earlier (the first then changes nothing), refuses one effective later', () => {
      expect(given([hired, exit]).when(changeTo('inactive', '2024-09-15T00:00:00.000Z'))()).toHaveLength(1);
      expect(() => given([hired, exit]).when(changeTo('inactive', '2024-10-05T00:00:00.000Z'))()).toThrow(ConflictError);
    });
  });

  describe('without an effective date', () => {
    it('takes a future hire date as the effective instant, and validates nothing', () => {
      const future = { ...hired, data: { ...hired.data, hiredAt: '2025-06-01T09:00:00.000Z' } } satisfies EmployeeEvent;
      const [event] = given([future]).when(changeTo('inactive'))();
      expect(event?.type === 'EmployeeStatusChanged' && event.data.effectiveAt).toBe('2025-06-01T09:00:00.000Z');
    });

    it('takes effect with the status in force when that took effect a few ms ahead of this clock', () => {
      // Another gateway's clock, a little ahead, recorded the leave.
      const ahead: EmployeeEvent = {
        type: 'EmployeeStatusChanged',
        data: {
          employeeId,
          from: 'active',
          to: 'on_leave',
          reason: null,
          changedAt: '2025-03-01T10:00:00.004Z',
          effectiveAt: '2025-03-01T10:00:00.004Z',
        },
      };
      const events = given([hired, ahead]).when(changeTo('active'))();
      expect(events.map((e) => e.type === 'EmployeeStatusChanged' && e.data.effectiveAt)).toEqual(['2025-03-01T10:00:00.004Z']);
      const state = [hired, ahead, ...events].reduce(employeeDecider.evolve, employeeDecider.initialState);
      expect(state.kind === 'hired' && state.status).toBe('active');
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
      const fromAt = (effectiveAt: string) =>
        given([hired, legacy])
          .when(changeTo('inactive', effectiveAt))()
          .map((e) => e.type === 'EmployeeStatusChanged' && e.data.from);
      expect(fromAt('2024-11-15T11:59:59.999Z')).toEqual(['active']);
      expect(fromAt('2024-11-15T12:00:00.000Z')).toEqual(['on_leave']);
    });
  });
});
