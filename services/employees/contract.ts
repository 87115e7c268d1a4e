/**
 * The employee capability's published contract: what the read side may import. The events (the
 * only source of truth for an employee), the state they fold into (`evolve`) and the public view
 * of that state. Commands and `decide` stay in decide.ts.
 *
 * Events are past tense; `data` is what the projection and the history endpoint show, so it
 * carries values, not diffs of internal state.
 */
export const EMPLOYEE_STATUSES = ['active', 'inactive', 'on_leave'] as const;
export type EmployeeStatus = (typeof EMPLOYEE_STATUSES)[number];

export type EmployeeHired = {
  readonly type: 'EmployeeHired';
  readonly data: {
    readonly employeeId: string;
    readonly email: string;
    readonly firstName: string;
    readonly lastName: string;
    readonly department: string | null;
    readonly status: 'active';
    readonly hiredAt: string;
  };
};

/** Only the fields that changed are present. */
export type EmployeeDetailsChanged = {
  readonly type: 'EmployeeDetailsChanged';
  readonly data: {
    readonly employeeId: string;
    readonly firstName?: string;
    readonly lastName?: string;
    readonly department?: string | null;
  };
};

export type EmployeeEmailChanged = {
  readonly type: 'EmployeeEmailChanged';
  readonly data: { readonly employeeId: string; readonly email: string; readonly previousEmail: string };
};

export type EmployeeStatusChanged = {
  readonly type: 'EmployeeStatusChanged';
  readonly data: {
    readonly employeeId: string;
    readonly from: EmployeeStatus;
    readonly to: EmployeeStatus;
    readonly reason: string | null;
    /** When the change was recorded. */
    readonly changedAt: string;
    /**
     * When the change took effect (HR records a leave or an exit on the day it happened). Events
     * recorded before effective dates existed lack it: read it through `statusEffectiveAt`.
     */
    readonly effectiveAt?: string;
  };
};

/** The instant a status change took effect; an event without `effectiveAt` took effect when it was recorded. */
export const statusEffectiveAt = (data: EmployeeStatusChanged['data']): string => data.effectiveAt ?? data.changedAt;

export type EmployeeRoleAssigned = {
  readonly type: 'EmployeeRoleAssigned';
  readonly data: { readonly employeeId: string; readonly roleId: string };
};

export type EmployeeEvent = EmployeeHired | EmployeeDetailsChanged | EmployeeEmailChanged | EmployeeStatusChanged | EmployeeRoleAssigned;

export type EmployeeEventType = EmployeeEvent['type'];

export const EMPLOYEE_EVENT_TYPES: readonly EmployeeEventType[] = [
  'EmployeeHired',
  'EmployeeDetailsChanged',
  'EmployeeEmailChanged',
  'EmployeeStatusChanged',
  'EmployeeRoleAssigned',
];

/** Stream of one employee. The tenant is part of the id, so no read can cross tenants by id. */
export const employeeStreamId = (tenantId: string, employeeId: string): string => `employee-${tenantId}-${employeeId}`;

const EMPLOYEE_STREAM = /^employee-([0-9a-f-]{36})-([0-9A-HJKMNP-TV-Z]{26})$/;

/** Inverse of `employeeStreamId`, or undefined for any other stream. */
export function parseEmployeeStreamId(streamId: string): { tenantId: string; employeeId: string } | undefined {
  const match = EMPLOYEE_STREAM.exec(streamId);
  if (!match?.[1] || !match[2]) return undefined;
  return { tenantId: match[1], employeeId: match[2] };
}

/** Email addresses are unique per tenant case-insensitively: the service's one comparison key. */
export { normaliseEmail } from '../../shared/email.ts';

export type Employee = {
  readonly id: string;
  readonly email: string;
  readonly firstName: string;
  readonly lastName: string;
  readonly department: string | null;
  readonly status: EmployeeStatus;
  readonly hiredAt: string;
  readonly roleId: string | null;
};

/**
 * `statusSince`: when the current status took effect (the hire date until a status change), so a
 * back-dated change can be refused when it would take effect before the change it follows.
 */
export type EmployeeState = { readonly kind: 'none' } | ({ readonly kind: 'hired'; readonly statusSince: string } & Employee);

export const initialState: EmployeeState = { kind: 'none' };

export function evolve(state: EmployeeState, event: EmployeeEvent): EmployeeState {
  switch (event.type) {
    case 'EmployeeHired': {
      const { employeeId, email, firstName, lastName, department, status, hiredAt } = event.data;
      return { kind: 'hired', id: employeeId, email, firstName, lastName, department, status, hiredAt, roleId: null, statusSince: hiredAt };
    }
    case 'EmployeeDetailsChanged': {
      if (state.kind !== 'hired') return state;
      const { firstName, lastName, department } = event.data;
      return {
        ...state,
        ...(firstName !== undefined && { firstName }),
        ...(lastName !== undefined && { lastName }),
        ...(department !== undefined && { department }),
      };
    }
    case 'EmployeeEmailChanged':
      return state.kind === 'hired' ? { ...state, email: event.data.email } : state;
    case 'EmployeeStatusChanged':
      return state.kind === 'hired' ? { ...state, status: event.data.to, statusSince: statusEffectiveAt(event.data) } : state;
    case 'EmployeeRoleAssigned':
      return state.kind === 'hired' ? { ...state, roleId: event.data.roleId } : state;
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}

/** The public representation of an employee. `roleId` is an input and stays out of it. */
export function toEmployeeView(state: Extract<EmployeeState, { kind: 'hired' }>) {
  return {
    id: state.id,
    email: state.email,
    firstName: state.firstName,
    lastName: state.lastName,
    department: state.department,
    status: state.status,
    hiredAt: state.hiredAt,
  };
}

export type EmployeeView = ReturnType<typeof toEmployeeView>;
