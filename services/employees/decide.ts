import { BadRequestError, ConflictError, ErasedError, NotFoundError } from '../../shared/errors.ts';
import { evolve, statusAppliesFrom, type EmployeeEvent, type EmployeeState, type EmployeeStatus } from './contract.ts';

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

/** Forget the person (their right to erasure); answered with the same `erasedAt` when repeated. */
export type EraseEmployee = {
  readonly type: 'EraseEmployee';
  readonly data: Record<string, never>;
  readonly metadata: CommandMetadata;
};

export type EmployeeCommand = HireEmployee | ChangeEmployeeDetails | ChangeEmployeeStatus | AssignEmployeeRole | EraseEmployee;

/** Allowed status changes; anything else (including "to the same status") is a conflict. */
export const STATUS_TRANSITIONS: Readonly<Record<EmployeeStatus, readonly EmployeeStatus[]>> = {
  active: ['on_leave', 'inactive'],
  on_leave: ['active', 'inactive'],
  inactive: ['active'],
};

/** A status in effective time: in force from `at` until the next point (ties: the later recorded). */
type StatusPoint = { readonly at: number; readonly status: EmployeeStatus };

/**
 * The decider's state: the employee, and for a hired one its status changes in effective order,
 * so a back-dated change is checked against the status in force when it takes effect.
 */
export type DeciderState =
  | { readonly kind: 'none' }
  | (Extract<EmployeeState, { kind: 'hired' }> & { readonly statuses: readonly StatusPoint[] })
  | Extract<EmployeeState, { kind: 'erased' }>;

export const initialState: DeciderState = { kind: 'none' };

export function evolveDecider(state: DeciderState, event: EmployeeEvent): DeciderState {
  const next = evolve(state, event);
  if (next.kind === 'erased') return next;
  if (next.kind !== 'hired') return { kind: 'none' };
  if (state.kind !== 'hired') return { ...next, statuses: [{ at: Date.parse(next.hiredAt), status: next.status }] };
  if (event.type !== 'EmployeeStatusChanged') return { ...next, statuses: state.statuses };
  const at = Date.parse(statusAppliesFrom(event.data, next.hiredAt));
  const after = state.statuses.findIndex((p) => p.at > at);
  const statuses =
    after === -1 ? [...state.statuses, { at, status: event.data.to }] : state.statuses.toSpliced(after, 0, { at, status: event.data.to });
  return { ...next, statuses };
}

/** The status in force at `at`: the last point at or before it (the hire's when `at` precedes every change). */
const statusAt = (state: Extract<DeciderState, { kind: 'hired' }>, at: number): EmployeeStatus =>
  state.statuses.findLast((p) => p.at <= at)?.status ?? state.statuses[0]?.status ?? state.status;

/** An erased employee is gone for good (410), not unknown (404): its id was real and stays reserved. */
export function requireHired(state: DeciderState): Extract<DeciderState, { kind: 'hired' }> {
  if (state.kind === 'erased') throw new ErasedError('This employee was erased', { erasedAt: state.erasedAt });
  if (state.kind !== 'hired') throw new NotFoundError('No employee with this id');
  return state;
}

/**
 * A date the client sent must lie between the hire and now (the future is not recorded yet). A
 * change may take effect before the status in force now: it then rewrites the past only.
 */
function assertEffectiveAt(effectiveAt: string, current: Extract<DeciderState, { kind: 'hired' }>, now: string): void {
  const at = Date.parse(effectiveAt);
  const refuse = (message: string) => {
    throw new BadRequestError(`effectiveAt ${message}`, { errors: [{ path: 'body.effectiveAt', message }] });
  };
  if (at > Date.parse(now)) refuse('must not be in the future');
  if (at < Date.parse(current.hiredAt)) refuse(`must not be before the hire date (${current.hiredAt})`);
}

export function decide(command: EmployeeCommand, state: DeciderState): EmployeeEvent[] {
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
      // Without a date the change is recorded as in force from now on: at the latest of now and
      // when the status in force now took effect (a future hire date, or a change stamped a few
      // ms ahead by another gateway's clock), so it always becomes the current status.
      let effectiveAt = command.metadata.now;
      if (command.data.effectiveAt !== undefined) {
        effectiveAt = command.data.effectiveAt;
        assertEffectiveAt(effectiveAt, current, command.metadata.now);
      } else if (Date.parse(current.statusSince) > Date.parse(effectiveAt)) effectiveAt = current.statusSince;
      // The transition is the one in effective order: from the status in force at that instant.
      const from = statusAt(current, Date.parse(effectiveAt));
      if (!STATUS_TRANSITIONS[from].includes(status)) {
        throw new ConflictError(`An employee cannot go from ${from} to ${status}`, {
          currentStatus: from,
          allowed: STATUS_TRANSITIONS[from],
        });
      }
      return [
        {
          type: 'EmployeeStatusChanged',
          data: {
            employeeId: current.id,
            from,
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
    case 'EraseEmployee': {
      // Erasing twice is one erasure: nothing more is recorded, and the first `erasedAt` stands.
      if (state.kind === 'erased') return [];
      const current = requireHired(state);
      return [{ type: 'EmployeeErased', data: { employeeId: current.id, erasedAt: command.metadata.now } }];
    }
    default: {
      const unhandled: never = command;
      return unhandled;
    }
  }
}

export const employeeDecider = { initialState, evolve: evolveDecider, decide };
