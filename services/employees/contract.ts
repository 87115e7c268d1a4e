/**
 * The employee capability's published contract: what the read side may import. The events (the
 * only source of truth for an employee) and how a page of the log groups into each employee's,
 * the state they fold into (`evolve`) and the public view of that state. Commands and `decide`
 * stay in decide.ts.
 *
 * Events are past tense; `data` is what the projection and the history endpoint show, so it
 * carries values, not diffs of internal state.
 */
import type { RecordedEvent } from '../../shared/event-store/port.ts';
import type { PersonalDataPolicy } from '../../shared/personal-data/policy.ts';

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
    /** The status in force at the effective instant (for a back-dated change, not the current one). */
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

/**
 * The person was forgotten at their request: their personal fields can no longer be read
 * anywhere (their data key is destroyed with this event). What is not personal (id, department,
 * status history, dates) stays, and no command is accepted for the employee afterwards.
 */
export type EmployeeErased = {
  readonly type: 'EmployeeErased';
  readonly data: { readonly employeeId: string; readonly erasedAt: string };
};

export type EmployeeEvent =
  EmployeeHired | EmployeeDetailsChanged | EmployeeEmailChanged | EmployeeStatusChanged | EmployeeRoleAssigned | EmployeeErased;

export type EmployeeEventType = EmployeeEvent['type'];

export const EMPLOYEE_EVENT_TYPES: readonly EmployeeEventType[] = [
  'EmployeeHired',
  'EmployeeDetailsChanged',
  'EmployeeEmailChanged',
  'EmployeeStatusChanged',
  'EmployeeRoleAssigned',
  'EmployeeErased',
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

/** Whether the event is one of an employee's (its stream may hold no other, but a page holds every stream's). */
const isEmployeeEvent = (event: RecordedEvent): boolean => (EMPLOYEE_EVENT_TYPES as readonly string[]).includes(event.type);

/** The employee an event belongs to, if it is one of an employee's events. */
export const employeeOf = (event: RecordedEvent): { tenantId: string; employeeId: string } | undefined =>
  isEmployeeEvent(event) ? parseEmployeeStreamId(event.streamId) : undefined;

/** One employee's events of a page, in the page's (global) order. */
export type EmployeeBatch = { readonly tenantId: string; readonly id: string; readonly events: RecordedEvent[] };

/** The key the employee read models index an employee by within a page. */
export const employeeKey = (tenantId: string, id: string): string => `${tenantId}/${id}`;

/** A page's employee events grouped per employee (other events are left out), keyed by `employeeKey`. */
export function byEmployee(events: readonly RecordedEvent[]): Map<string, EmployeeBatch> {
  const batches = new Map<string, EmployeeBatch>();
  for (const event of events) {
    const parsed = employeeOf(event);
    if (!parsed) continue;
    const key = employeeKey(parsed.tenantId, parsed.employeeId);
    const batch = batches.get(key) ?? { tenantId: parsed.tenantId, id: parsed.employeeId, events: [] };
    batch.events.push(event);
    batches.set(key, batch);
  }
  return batches;
}

/**
 * The personal fields of each event that carries any: sealed in the event store with the
 * employee's own data key (the subject is the employee id), so erasing the employee destroys the
 * key and leaves them unreadable. A new personal field goes here, in the same change that adds it.
 */
export const EMPLOYEE_PERSONAL_FIELDS: { readonly [E in EmployeeEvent as E['type']]?: readonly (keyof E['data'] & string)[] } = {
  EmployeeHired: ['email', 'firstName', 'lastName'],
  EmployeeDetailsChanged: ['firstName', 'lastName'],
  EmployeeEmailChanged: ['email', 'previousEmail'],
  // Free text about the person (why they are on leave or left, say): as personal as a name.
  EmployeeStatusChanged: ['reason'],
};

/** Every personal field of the employee's events: what a parked copy of one loses on erasure. */
export const PERSONAL_FIELDS: readonly string[] = [...new Set(Object.values(EMPLOYEE_PERSONAL_FIELDS).flat())];

/**
 * The streams of the `EmployeeErased` events among `events`. A projection applying one blanks the
 * person's parked events (redactParkedEvents, shared/projections/parkedRedactions.ts), as the
 * erasure's own transaction does: with the log on KurrentDB the event is appended, and read,
 * before that transaction runs, which a crash may put off until the erasure is repeated.
 */
export const erasedStreams = (events: ReadonlyArray<{ readonly type: string; readonly streamId: string }>): string[] =>
  events.filter((e) => e.type === 'EmployeeErased').map((e) => e.streamId);

export const employeePersonalData: PersonalDataPolicy = {
  fields: EMPLOYEE_PERSONAL_FIELDS,
  subjectOf(streamId) {
    const parsed = parseEmployeeStreamId(streamId);
    return parsed && { tenantId: parsed.tenantId, subjectId: parsed.employeeId };
  },
};

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

/** What is left of an erased employee: the facts that are not personal, and when the person was erased. */
export type ErasedEmployee = Pick<Employee, 'id' | 'department' | 'status' | 'hiredAt'> & {
  readonly statusSince: string;
  readonly erasedAt: string;
};

/**
 * `statusSince`: when the status in force now took effect (the hire date until a status change).
 * Status changes may be back-dated, so the status in force now is the one with the latest
 * effective instant (ties: the later recorded), not necessarily the last recorded.
 */
export type EmployeeState =
  | { readonly kind: 'none' }
  | ({ readonly kind: 'hired'; readonly statusSince: string } & Employee)
  | ({ readonly kind: 'erased' } & ErasedEmployee);

/**
 * The instant a status change applies from in effective time: its effective instant, or the hire
 * when that is later (a change recorded before a future hire date applies from the hire).
 */
export const statusAppliesFrom = (data: EmployeeStatusChanged['data'], hiredAt: string): string => {
  const at = statusEffectiveAt(data);
  return Date.parse(at) >= Date.parse(hiredAt) ? at : hiredAt;
};

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
    case 'EmployeeStatusChanged': {
      if (state.kind !== 'hired') return state;
      const from = statusAppliesFrom(event.data, state.hiredAt);
      // A change back-dated before the status in force now only rewrites the past; at the same
      // instant the later recorded wins.
      return Date.parse(from) >= Date.parse(state.statusSince) ? { ...state, status: event.data.to, statusSince: from } : state;
    }
    case 'EmployeeRoleAssigned':
      return state.kind === 'hired' ? { ...state, roleId: event.data.roleId } : state;
    case 'EmployeeErased': {
      if (state.kind !== 'hired') return state;
      const { id, department, status, hiredAt, statusSince } = state;
      return { kind: 'erased', id, department, status, hiredAt, statusSince, erasedAt: event.data.erasedAt };
    }
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

/**
 * An erased employee as the change feed shows it (every change of theirs, once erased): the
 * personal fields null, the facts that are not personal as they were.
 */
export function toErasedView(state: Extract<EmployeeState, { kind: 'erased' }>) {
  return {
    id: state.id,
    email: null,
    firstName: null,
    lastName: null,
    department: state.department,
    status: state.status,
    hiredAt: state.hiredAt,
  };
}

/** The personal fields of the employee view: what erasure blanks wherever a view was stored. */
export const PERSONAL_VIEW_FIELDS = ['email', 'firstName', 'lastName'] as const;

/** Those fields as an erased person's view holds them. */
export const BLANK_PERSONAL_VIEW_FIELDS = Object.freeze(Object.fromEntries(PERSONAL_VIEW_FIELDS.map((field) => [field, null]))) as {
  readonly [F in (typeof PERSONAL_VIEW_FIELDS)[number]]: null;
};
