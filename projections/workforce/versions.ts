import { floorTo } from '../../shared/series/intervals.ts';
import { pgDate } from '../../shared/db/timestamps.ts';
import { statusEffectiveAt, type EmployeeEvent, type EmployeeStatus } from '../../services/employees/contract.ts';

/**
 * An employee's history in effective time: consecutive versions, each the employee as it was
 * over [validFrom, validTo) (validTo null: still in force). The first starts at the hire date.
 *
 * A change applies from its effective instant: the version in force then is split there. A status
 * change takes effect at its `effectiveAt` (events without one, when recorded) and holds until the
 * next status change in effective time (ties: the later recorded wins), so a change back-dated
 * before a later one rewrites only the interval up to it. Other changes take effect when recorded
 * and apply to every later version. Nothing takes effect before the hire: a change recorded before
 * a future hire date applies from the hire.
 *
 * A version that starts with a status change stays a version of its own even when it changes
 * nothing (`inactive` after `inactive`): a change back-dated before it must stop there.
 */
export type Version = {
  readonly validFrom: number;
  readonly validTo: number | null;
  readonly department: string | null;
  /** Null once the person is erased (or a field that no longer opens): every version loses them. */
  readonly firstName: string | null;
  readonly lastName: string | null;
  readonly email: string | null;
  readonly status: EmployeeStatus;
  readonly hiredAt: number;
  /**
   * When the version starts with a status change: the status in force just before it (possibly the
   * same). Null on the first version (the hire) and on versions that start with another change.
   */
  readonly previousStatus: EmployeeStatus | null;
};

type Patch = Partial<Pick<Version, 'department' | 'firstName' | 'lastName' | 'email'>>;

const ATTRIBUTES = ['department', 'firstName', 'lastName', 'email', 'status'] as const;

/** A parsed instant; a malformed one throws, so the runner parks the event instead of writing NaN. */
export function instantMs(iso: string, what: string): number {
  const ms = Date.parse(iso);
  if (Number.isNaN(ms)) throw new Error(`${what} is not an instant: ${JSON.stringify(iso).slice(0, 64)}`);
  return ms;
}

const startsStatusChange = (v: Version, i: number): boolean => i > 0 && v.previousStatus !== null;

/**
 * `versions` with `patch` in force over [at, until) (until null: from `at` on). `statusChange`: the
 * patch is a status change at `at`, which the version starting there records.
 */
function rewrite(
  versions: readonly Version[],
  at: number,
  until: number | null,
  patch: Partial<Version>,
  statusChange: boolean,
): Version[] {
  const split: { v: Version; change: boolean }[] = [];
  versions.forEach((v, i) => {
    const change = startsStatusChange(v, i);
    const covered = v.validFrom >= at && (until === null || v.validFrom < until);
    if (v.validTo !== null && v.validTo <= at) split.push({ v, change });
    else if (v.validFrom >= at)
      split.push({ v: covered ? { ...v, ...patch } : v, change: change || (statusChange && v.validFrom === at && i > 0) });
    else split.push({ v: { ...v, validTo: at }, change }, { v: { ...v, ...patch, validFrom: at }, change: statusChange });
  });
  // Neighbours that no longer differ become one version, unless the later starts with a status
  // change; then each status change learns the status it follows.
  const merged: { v: Version; change: boolean }[] = [];
  for (const entry of split) {
    const last = merged.at(-1);
    if (last && !entry.change && ATTRIBUTES.every((a) => last.v[a] === entry.v[a])) last.v = { ...last.v, validTo: entry.v.validTo };
    else merged.push({ ...entry });
  }
  return merged.map(({ v, change }, i) => ({ ...v, previousStatus: change && i > 0 ? merged[i - 1]!.v.status : null }));
}

/** `versions` with `patch` (fields other than the status) in force from `at` on. */
export const applyFrom = (versions: readonly Version[], at: number, patch: Patch): Version[] => rewrite(versions, at, null, patch, false);

/** `versions` with `status` in force from `at` until the next status change effective after `at`. */
export function applyStatusFrom(versions: readonly Version[], at: number, status: EmployeeStatus): Version[] {
  const next = versions.find((v, i) => startsStatusChange(v, i) && v.validFrom > at);
  return rewrite(versions, at, next?.validFrom ?? null, { status }, true);
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
      return applyStatusFrom(versions, from(instantMs(statusEffectiveAt(event.data), 'effectiveAt')), event.data.to);
    case 'EmployeeRoleAssigned':
      return [...versions];
    case 'EmployeeErased':
      return redactVersions(versions);
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}

/**
 * The versions of an erased person: names and email gone from every one, everything else (dates,
 * department, status) kept, so the workforce figures go on counting them.
 */
export const redactVersions = (versions: readonly Version[]): Version[] =>
  versions.map((v) => ({ ...v, firstName: null, lastName: null, email: null }));

/** Statuses counted in the headcount. */
export const EMPLOYED: readonly EmployeeStatus[] = ['active', 'on_leave'];

/**
 * Whether a version starts with an exit: a change to `inactive` from a status that was not, in
 * effective order; or the first version when it is already `inactive` (an exit at the very hire
 * instant: counted as a hire and an exit, never in the headcount).
 */
export const isExit = (v: Version, i: number): boolean =>
  v.status === 'inactive' && (i === 0 || (v.previousStatus !== null && v.previousStatus !== 'inactive'));

/** The UTC day of an instant as `YYYY-MM-DD`. */
export const utcDay = (ms: number): string => pgDate(floorTo('day', ms));

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
    if (isExit(v, i)) add(v.validFrom, v, 'exits', 1);
  });
}
