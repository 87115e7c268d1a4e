import { statusEffectiveAt, type EmployeeEvent, type EmployeeStatus } from '../../services/employees/contract.ts';

/**
 * An employee's history in effective time: consecutive versions, each the employee as it was
 * over [validFrom, validTo) (validTo null: still in force). The first starts at the hire date.
 *
 * Every change applies from its effective instant onwards: the version in force then is split
 * there, and the changed fields are set on the part after it and on every later version. A status
 * change takes effect at its `effectiveAt` (events without one, when recorded); other changes when
 * recorded. Nothing takes effect before the hire: a change recorded before a future hire date
 * applies from the hire. The write side refuses a status change effective before the current
 * status took effect, so no later version carries a status a back-dated change must keep.
 */
export type Version = {
  readonly validFrom: number;
  readonly validTo: number | null;
  readonly department: string | null;
  readonly firstName: string;
  readonly lastName: string;
  readonly email: string;
  readonly status: EmployeeStatus;
  readonly hiredAt: number;
  /** The status of the version before (null on the first): a version that turns it `inactive` is an exit. */
  readonly previousStatus: EmployeeStatus | null;
};

type Patch = Partial<Pick<Version, 'department' | 'firstName' | 'lastName' | 'email' | 'status'>>;

const ATTRIBUTES = ['department', 'firstName', 'lastName', 'email', 'status'] as const;

/** A parsed instant; a malformed one throws, so the runner parks the event instead of writing NaN. */
export function instantMs(iso: string, what: string): number {
  const ms = Date.parse(iso);
  if (Number.isNaN(ms)) throw new Error(`${what} is not an instant: ${JSON.stringify(iso).slice(0, 64)}`);
  return ms;
}

/** `versions` with `patch` in force from `at` on. */
export function applyFrom(versions: readonly Version[], at: number, patch: Patch): Version[] {
  const split: Version[] = [];
  for (const v of versions) {
    if (v.validTo !== null && v.validTo <= at) split.push(v);
    else if (v.validFrom >= at) split.push({ ...v, ...patch });
    else split.push({ ...v, validTo: at }, { ...v, ...patch, validFrom: at });
  }
  // Neighbours that no longer differ become one version; then each learns its predecessor's status.
  const merged: Version[] = [];
  for (const v of split) {
    const last = merged.at(-1);
    if (last && ATTRIBUTES.every((a) => last[a] === v[a])) merged[merged.length - 1] = { ...last, validTo: v.validTo };
    else merged.push(v);
  }
  return merged.map((v, i) => ({ ...v, previousStatus: i === 0 ? null : merged[i - 1]!.status }));
}

/**
 * The versions after one event. `recordedAt`: when the event was recorded (the effective instant of
 * changes without an effective date of their own).
 */
export function evolveVersions(versions: readonly Version[], event: EmployeeEvent, recordedAt: number): Version[] {
  if (event.type === 'EmployeeHired') {
    if (versions.length > 0) return [...versions];
    const d = event.data;
    const hiredAt = instantMs(d.hiredAt, 'hiredAt');
    return [
      {
        validFrom: hiredAt,
        validTo: null,
        department: d.department,
        firstName: d.firstName,
        lastName: d.lastName,
        email: d.email,
        status: d.status,
        hiredAt,
        previousStatus: null,
      },
    ];
  }
  const first = versions[0];
  if (!first) return []; // a change to an employee never hired: nothing to record
  const from = (at: number) => Math.max(at, first.hiredAt);
  switch (event.type) {
    case 'EmployeeDetailsChanged': {
      const { firstName, lastName, department } = event.data;
      return applyFrom(versions, from(recordedAt), {
        ...(firstName !== undefined && { firstName }),
        ...(lastName !== undefined && { lastName }),
        ...(department !== undefined && { department }),
      });
    }
    case 'EmployeeEmailChanged':
      return applyFrom(versions, from(recordedAt), { email: event.data.email });
    case 'EmployeeStatusChanged':
      return applyFrom(versions, from(instantMs(statusEffectiveAt(event.data), 'effectiveAt')), { status: event.data.to });
    case 'EmployeeRoleAssigned':
      return [...versions];
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}

/** Statuses counted in the headcount. */
export const EMPLOYED: readonly EmployeeStatus[] = ['active', 'on_leave'];

/** Whether a version starts with a change to `inactive` (an exit). */
export const isExit = (v: Version): boolean => v.status === 'inactive' && v.previousStatus !== null && v.previousStatus !== 'inactive';

const DAY_MS = 86_400_000;
/** The UTC day of an instant as `YYYY-MM-DD`. */
export const utcDay = (ms: number): string => new Date(Math.floor(ms / DAY_MS) * DAY_MS).toISOString().slice(0, 10);

/**
 * What an employee's versions add to the daily counters, keyed by (tenant, day, department, status):
 * +1 where a version starts and −1 where it ends (so the sum over the days up to D is the number
 * in force at the end of D), hires on the hire day and exits on the day they took effect. The
 * live handler writes `contributions(after) − contributions(before)`.
 */
export type Contribution = {
  tenantId: string;
  day: string;
  department: string;
  status: EmployeeStatus;
  inForce: number;
  hires: number;
  exits: number;
};

export function contributions(tenantId: string, versions: readonly Version[], sign: 1 | -1, into: Map<string, Contribution>): void {
  const add = (ms: number, v: Version, what: 'inForce' | 'hires' | 'exits', n: number) => {
    const day = utcDay(ms);
    const department = v.department ?? '';
    const key = `${tenantId}\u0000${day}\u0000${department}\u0000${v.status}`;
    const entry = into.get(key) ?? { tenantId, day, department, status: v.status, inForce: 0, hires: 0, exits: 0 };
    entry[what] += sign * n;
    into.set(key, entry);
  };
  versions.forEach((v, i) => {
    add(v.validFrom, v, 'inForce', 1);
    if (v.validTo !== null) add(v.validTo, v, 'inForce', -1);
    if (i === 0) add(v.hiredAt, v, 'hires', 1);
    if (isExit(v)) add(v.validFrom, v, 'exits', 1);
  });
}
