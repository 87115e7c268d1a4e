import { BadRequestError, ConflictError, NotFoundError } from '../../shared/errors.ts';
import { evolve, initialState, type EmployeeEvent, type EmployeeState, type EmployeeStatus } from './contract.ts';

/**
 * The employee decider: pure `{ initialState, evolve, decide }`. Everything that varies from one
 * call to the next (the clock, the new id, the actor, the tenant) comes in as command data or
 * metadata, so a spec can state exactly which events a command must produce.
 */
export type CommandMetadata = {
  readonly tenantId: string;
  /** User id of whoever issued the command (kept in the events' metadata for the audit trail). */
  readonly actor: string;
  /** ISO 8601 UTC instant the command is handled at. */
  readonly now: string;
};

export type HireEmployee = {
  readonly type: 'HireEmployee';
  readonly data: {
    readonly employeeId: string;
    readonly email: string;
    readonly firstName: string;
    readonly lastName: string;
    readonly department?: string | null;
    /** For imports of existing staff; defaults to `metadata.now`. */
    readonly hiredAt?: string;
    readonly roleId?: string;
  };
  readonly metadata: CommandMetadata;
};

export type ChangeEmployeeDetails = {
  readonly type: 'ChangeEmployeeDetails';
  readonly data: {
    readonly firstName?: string;
    readonly lastName?: string;
    readonly department?: string | null;
    readonly email?: string;
  };
  readonly metadata: CommandMetadata;
};

export type ChangeEmployeeStatus = {
  readonly type: 'ChangeEmployeeStatus';
  readonly data: {
    readonly status: EmployeeStatus;
    readonly reason?: string;
    /** ISO 8601 UTC instant the change took effect; defaults to `metadata.now`. */
    readonly effectiveAt?: string;
  };
  readonly metadata: CommandMetadata;
};

export type AssignEmployeeRole = {
  readonly type: 'AssignEmployeeRole';
  readonly data: { readonly roleId: string };
  readonly metadata: CommandMetadata;
};

export type EmployeeCommand = HireEmployee | ChangeEmployeeDetails | ChangeEmployeeStatus | AssignEmployeeRole;

/** Allowed status changes; anything else (including "to the same status") is a conflict. */
export const STATUS_TRANSITIONS: Readonly<Record<EmployeeStatus, readonly EmployeeStatus[]>> = {
  active: ['on_leave', 'inactive'],
  on_leave: ['active', 'inactive'],
  inactive: ['active'],
};

function requireHired(state: EmployeeState): Extract<EmployeeState, { kind: 'hired' }> {
  if (state.kind !== 'hired') throw new NotFoundError('No employee with this id');
  return state;
}

/**
 * A status change takes effect no later than now (the future is not recorded yet), not before the
 * hire, and not before the status it replaces took effect: status changes then follow one another
 * in effective time as they do in the stream, so the status in force today is the current status.
 */
function assertEffectiveAt(effectiveAt: string, current: Extract<EmployeeState, { kind: 'hired' }>, now: string): void {
  const at = Date.parse(effectiveAt);
  const refuse = (message: string) => {
    throw new BadRequestError(`effectiveAt ${message}`, { errors: [{ path: 'body.effectiveAt', message }] });
  };
  if (at > Date.parse(now)) refuse('must not be in the future');
  if (at < Date.parse(current.hiredAt)) refuse(`must not be before the hire date (${current.hiredAt})`);
  if (at < Date.parse(current.statusSince)) refuse(`must not be before the current status took effect (${current.statusSince})`);
}

export function decide(command: EmployeeCommand, state: EmployeeState): EmployeeEvent[] {
  switch (command.type) {
    case 'HireEmployee': {
      if (state.kind !== 'none') throw new ConflictError('This employee already exists');
      const { employeeId, email, firstName, lastName, department, hiredAt, roleId } = command.data;
      const hired: EmployeeEvent = {
        type: 'EmployeeHired',
        data: {
          employeeId,
          email,
          firstName,
          lastName,
          department: department ?? null,
          status: 'active',
          hiredAt: hiredAt ?? command.metadata.now,
        },
      };
      return roleId === undefined ? [hired] : [hired, { type: 'EmployeeRoleAssigned', data: { employeeId, roleId } }];
    }
    case 'ChangeEmployeeDetails': {
      const current = requireHired(state);
      const { firstName, lastName, department, email } = command.data;
      const changed = {
        ...(firstName !== undefined && firstName !== current.firstName && { firstName }),
        ...(lastName !== undefined && lastName !== current.lastName && { lastName }),
        ...(department !== undefined && department !== current.department && { department }),
      };
      const events: EmployeeEvent[] = [];
      if (Object.keys(changed).length > 0) {
        events.push({ type: 'EmployeeDetailsChanged', data: { employeeId: current.id, ...changed } });
      }
      if (email !== undefined && email !== current.email) {
        events.push({ type: 'EmployeeEmailChanged', data: { employeeId: current.id, email, previousEmail: current.email } });
      }
      return events;
    }
    case 'ChangeEmployeeStatus': {
      const current = requireHired(state);
      const { status, reason } = command.data;
      if (!STATUS_TRANSITIONS[current.status].includes(status)) {
        throw new ConflictError(`An employee cannot go from ${current.status} to ${status}`, {
          currentStatus: current.status,
          allowed: STATUS_TRANSITIONS[current.status],
        });
      }
      const effectiveAt = command.data.effectiveAt ?? command.metadata.now;
      assertEffectiveAt(effectiveAt, current, command.metadata.now);
      return [
        {
          type: 'EmployeeStatusChanged',
          data: {
            employeeId: current.id,
            from: current.status,
            to: status,
            reason: reason ?? null,
            changedAt: command.metadata.now,
            effectiveAt,
          },
        },
      ];
    }
    case 'AssignEmployeeRole': {
      // Always recorded, even when the stream already names this role: the user's role may have
      // been changed since (ops CLI), and an explicit assignment must be applied again.
      const current = requireHired(state);
      return [{ type: 'EmployeeRoleAssigned', data: { employeeId: current.id, roleId: command.data.roleId } }];
    }
    default: {
      const unhandled: never = command;
      return unhandled;
    }
  }
}

export const employeeDecider = { initialState, evolve, decide };
