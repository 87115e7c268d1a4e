import { createHash, randomUUID } from 'node:crypto';
import type { EmailHash } from '../../shared/personal-data/emailHash.ts';
import { ConflictError, WrongExpectedRevisionError } from '../../shared/errors.ts';
import {
  comparePositions,
  type AppendRequest,
  type AppendResult,
  type EventMetadata,
  type EventStore,
  type ExpectedRevision,
  type GlobalPosition,
  type NewEvent,
  type RecordedEvent,
  type StreamSeen,
} from '../../shared/event-store/port.ts';
import { employeeDecider } from './decide.ts';
import { type EmployeeState, employeeStreamId, normaliseEmail, type EmployeeEvent } from './contract.ts';

/**
 * Email uniqueness per tenant without a unique index the event store does not have: one small
 * stream per normalised address, whose last event says who holds it (`EmployeeEmailReserved`) or
 * that it is free (`EmployeeEmailReleased`). It works the same on every adapter of the port,
 * because it only uses optimistic concurrency and the atomic multi-stream append. The address is
 * in neither the stream's name nor its events: the name carries a keyed hash of it
 * (shared/personal-data/emailHash.ts), so an erased employee's address cannot be read back.
 *
 * Invariant: the address an employee currently has is reserved by that employee. It holds under
 * any interleaving because a reservation stream only changes in the same atomic append
 * (`appendMany`) as the employee event that makes the change true, every stream at the revision
 * its part was planned from:
 * - a hire appends `EmployeeEmailReserved` with `EmployeeHired`;
 * - an email change appends `EmployeeEmailReserved` on the new address and
 *   `EmployeeEmailReleased` on the old one with `EmployeeEmailChanged`, the employee's stream at
 *   the revision the change was decided on (`planEmailChange`).
 * So no release can be decided on a stale view of the employee: if the employee moved back to the
 * address in between, its stream's revision moved and the whole append fails (and is planned
 * again); and there is nothing to undo when a command fails, since it appended nothing.
 *
 * A reservation held by an employee who does not have the address can still exist, written by an
 * append that was not atomic with the employee's (a crash between two separate appends, or such a
 * writer still in flight). It is orphaned once it is older than any command in flight (30 s), and
 * is then taken over at its exact revision. That takeover cannot race the holder moving back to
 * the address: such a move appends to this stream too, at the revision the takeover expects.
 * The protocol's failure cases and the one it replaced: docs/decisions/003-email-reservations.md.
 */
export type EmailReserved = {
  readonly type: 'EmployeeEmailReserved';
  readonly data: { readonly employeeId: string };
};
export type EmailReleased = { readonly type: 'EmployeeEmailReleased'; readonly data: { readonly employeeId: string } };

/** Longer than any writer takes between a reservation and its separate append to the employee stream. */
const IN_FLIGHT_GRACE_MS = 30_000;

export const RESERVATION_STREAM_PREFIX = 'employee-email-hmac-';

/** The reservation stream of `email` in the tenant, named by the address's keyed hash. */
export const emailReservationStreamId = (emailHash: EmailHash, tenantId: string, email: string): string =>
  `${RESERVATION_STREAM_PREFIX}${tenantId}-${emailHash(tenantId, email)}`;

/**
 * The name the first form of reservations had: a plain SHA-256 of the address (their events
 * carried it too). Until `ops privacy seal-existing` renames them (and always on KurrentDB, which
 * it cannot rewrite), an address with a stream of that form has its reservation kept there:
 * reading the keyed-hash name alone would find such an address free and let a second employee
 * take it. Only read and appended to, never created.
 */
export const legacyReservationStreamId = (tenantId: string, email: string): string =>
  `employee-email-${tenantId}-${createHash('sha256').update(normaliseEmail(email)).digest('hex')}`;

/** Whether the address has a reservation stream of the first form (then a hire plans from it instead of appending blind). */
export async function hasLegacyReservation(store: EventStore, input: Pick<ReservationInput, 'tenantId' | 'email'>): Promise<boolean> {
  return (await store.readStream(legacyReservationStreamId(input.tenantId, input.email), { maxCount: 1 })).length > 0;
}

type Holder = { readonly employeeId: string; readonly since: string } | null;

function currentHolder(events: readonly RecordedEvent[]): Holder {
  const last = events.at(-1);
  if (!last || last.type !== 'EmployeeEmailReserved') return null;
  const data = last.data as EmailReserved['data'];
  return { employeeId: data.employeeId, since: last.recordedAt };
}

async function employeeState(store: EventStore, tenantId: string, employeeId: string): Promise<EmployeeState> {
  const events = await store.readStream(employeeStreamId(tenantId, employeeId));
  return events.map((e) => ({ type: e.type, data: e.data }) as EmployeeEvent).reduce(employeeDecider.evolve, employeeDecider.initialState);
}

/**
 * Orphaned: held for longer than a command takes, by an employee who does not have this address.
 * A younger reservation may belong to a writer still in flight (reserved, not yet appended to the
 * employee), so it is never taken over, whatever the owner's stream says yet.
 */
async function isOrphaned(store: EventStore, tenantId: string, email: string, holder: NonNullable<Holder>, now: string): Promise<boolean> {
  if (withinGrace(holder, now)) return false;
  const owner = await employeeState(store, tenantId, holder.employeeId);
  return owner.kind !== 'hired' || normaliseEmail(owner.email) !== normaliseEmail(email);
}

/** Younger than any writer in flight between its two appends: never taken over, whatever its owner's stream says. */
const withinGrace = (holder: NonNullable<Holder>, now: string): boolean => Date.parse(now) - Date.parse(holder.since) <= IN_FLIGHT_GRACE_MS;

export type ReservationInput = {
  readonly emailHash: EmailHash;
  readonly tenantId: string;
  readonly email: string;
  readonly employeeId: string;
  /** The command's clock (ISO 8601). */
  readonly now: string;
  readonly metadata: EventMetadata;
};

// The problem names the field, never the address: its detail also becomes the error's message,
// which logs and the trace exporter (span status, recorded exception) carry.
const duplicate = () => new ConflictError('Another employee of this tenant already has this email address', { field: 'email' });

const reservedEvent = (input: ReservationInput): NewEvent => {
  const reserved: EmailReserved = {
    type: 'EmployeeEmailReserved',
    data: { employeeId: input.employeeId },
  };
  return { id: randomUUID(), ...reserved, metadata: input.metadata };
};

const releasedEvent = (input: Pick<ReservationInput, 'employeeId' | 'metadata'>): NewEvent => {
  const released: EmailReleased = { type: 'EmployeeEmailReleased', data: { employeeId: input.employeeId } };
  return { id: randomUUID(), ...released, metadata: input.metadata };
};

/**
 * The reservation of a never-used address, as one part of an atomic multi-stream append (a
 * create: reservation + new employee in one `appendMany`, no read). A conflict on it means the
 * address has a reservation stream already: then `planReservation` decides (held, released, orphaned).
 */
export function newReservationRequest(input: ReservationInput): AppendRequest {
  return {
    streamId: emailReservationStreamId(input.emailHash, input.tenantId, input.email),
    events: [reservedEvent(input)],
    expectedRevision: 'no_stream',
  };
}

/**
 * An address's reservation stream as read: its events, who holds it, and the revision to append
 * at.
 */
type Address = {
  readonly streamId: string;
  readonly events: readonly RecordedEvent[];
  readonly holder: Holder;
  readonly expected: ExpectedRevision;
  /** Both forms of its stream, as read. */
  readonly seen: readonly StreamSeen[];
};

async function readAddress(store: EventStore, input: Pick<ReservationInput, 'emailHash' | 'tenantId' | 'email'>): Promise<Address> {
  const keyed = emailReservationStreamId(input.emailHash, input.tenantId, input.email);
  const legacy = legacyReservationStreamId(input.tenantId, input.email);
  const [keyedEvents, legacyEvents] = await Promise.all([store.readStream(keyed), store.readStream(legacy)]);
  // The keyed-hash stream wins once it exists; until then a first-form stream holds the address.
  const [streamId, events] = keyedEvents.length === 0 && legacyEvents.length > 0 ? [legacy, legacyEvents] : [keyed, keyedEvents];
  return {
    streamId,
    events,
    holder: currentHolder(events),
    expected: events.length === 0 ? 'no_stream' : events.length - 1,
    seen: [
      { streamId: keyed, revision: keyedEvents.at(-1)?.revision ?? -1 },
      { streamId: legacy, revision: legacyEvents.at(-1)?.revision ?? -1 },
    ],
  };
}

/** `planReservation` on an address already read. */
async function reservationOf(store: EventStore, input: ReservationInput, address: Address): Promise<AppendRequest> {
  const { holder } = address;
  if (holder && holder.employeeId !== input.employeeId && !(await isOrphaned(store, input.tenantId, input.email, holder, input.now))) {
    throw duplicate();
  }
  return { streamId: address.streamId, events: [reservedEvent(input)], expectedRevision: address.expected };
}

/**
 * The part of an atomic append that holds `email` for `employeeId`, planned from the address's
 * stream as it is now (409 when another employee holds it and the reservation is not orphaned).
 * Also when `employeeId` holds it already: the append then confirms it at that revision, so that
 * nothing (an orphan takeover) can change the stream between this read and the append.
 */
export async function planReservation(store: EventStore, input: ReservationInput): Promise<AppendRequest> {
  return reservationOf(store, input, await readAddress(store, input));
}

/**
 * The part of an atomic append that gives `email` up, when `employeeId` holds it; null when it
 * does not (a state a non-atomic write can leave): then the address is not this employee's to
 * free, and its stream is left alone.
 */
export async function planRelease(store: EventStore, input: ReservationInput): Promise<AppendRequest | null> {
  const { streamId, holder, expected } = await readAddress(store, input);
  if (holder?.employeeId !== input.employeeId) return null;
  return { streamId, events: [releasedEvent(input)], expectedRevision: expected };
}

/**
 * What must be appended, atomically and with the employee's `EmployeeEmailChanged` from
 * `previousEmail` to `input.email` (different addresses once normalised), for the invariant to
 * hold afterwards: the new address reserved, the old one released.
 */
export async function planEmailChange(store: EventStore, input: ReservationInput, previousEmail: string): Promise<AppendRequest[]> {
  const [reserve, release] = await Promise.all([planReservation(store, input), planRelease(store, { ...input, email: previousEmail })]);
  return release ? [reserve, release] : [reserve];
}

/**
 * The employee who reserved the address last among its events (null when nobody did), whether
 * they hold it still or released it since; with `before`, last before that point of the log.
 */
function reserverBefore(events: readonly RecordedEvent[], before: GlobalPosition | null): string | null {
  const reserved = events.findLast(
    (e) => e.type === 'EmployeeEmailReserved' && (before === null || comparePositions(e.position, before) < 0),
  );
  return reserved ? (reserved.data as EmailReserved['data']).employeeId : null;
}

/**
 * The employee who reserved `email` last (see `reserverBefore`: as the address stood at `before`,
 * when given), and the address's streams as they were read.
 */
export async function lastReserver(
  store: EventStore,
  input: Pick<ReservationInput, 'emailHash' | 'tenantId' | 'email'>,
  before: GlobalPosition | null = null,
): Promise<{ readonly employeeId: string | null; readonly seen: readonly StreamSeen[] }> {
  const { events, seen } = await readAddress(store, input);
  return { employeeId: reserverBefore(events, before), seen };
}

/**
 * Standalone appends, not atomic with any employee stream, so the commands never use them (see
 * the invariant above). They write a reservation stream directly, as tools and specs need to set
 * up the states that non-atomic writes leave behind (orphans).
 *
 * Holds `email` for `employeeId`, or fails with 409 when another employee holds it (or takes it
 * meanwhile). Null when `employeeId` already held the address (nothing appended).
 */
export async function reserveEmail(store: EventStore, input: ReservationInput): Promise<AppendResult | null> {
  const address = await readAddress(store, input);
  if (address.holder?.employeeId === input.employeeId) return null;
  const reserve = await reservationOf(store, input, address);
  try {
    return await store.append(reserve.streamId, reserve.events, { expectedRevision: reserve.expectedRevision });
  } catch (error) {
    if (error instanceof WrongExpectedRevisionError) throw duplicate();
    throw error;
  }
}

/** Standalone, like `reserveEmail`: gives `email` up if `employeeId` holds it (losing a race here is fine). */
export async function releaseEmail(store: EventStore, input: ReservationInput): Promise<void> {
  const release = await planRelease(store, input);
  if (!release) return;
  try {
    await store.append(release.streamId, release.events, { expectedRevision: release.expectedRevision });
  } catch (error) {
    if (!(error instanceof WrongExpectedRevisionError)) throw error;
  }
}

/**
 * What `ops employees check-emails` finds for one employee's address:
 * - `ok`: reserved by the employee;
 * - `missing`: not reserved by it (free, or held by someone who no longer has it) — a state only a
 *   non-atomic write can leave; with `repair`, reserved for it now (`repaired`);
 * - `shared`: another employee has the same address and holds it (a duplicate to settle by hand:
 *   change one of the two addresses);
 * - `busy`: held by another employee for less than the in-flight grace, or changed while it was
 *   being repaired: look again later;
 * - `gone`: no hired employee under this id.
 */
export const RESERVATION_AUDITS = ['ok', 'repaired', 'missing', 'shared', 'busy', 'gone'] as const;
export type ReservationAudit = (typeof RESERVATION_AUDITS)[number];
/** The outcomes that leave something to do (the command's exit code 1). */
export const UNSETTLED_AUDITS: ReadonlySet<ReservationAudit> = new Set(['missing', 'shared', 'busy']);

export async function auditReservation(
  store: EventStore,
  input: Omit<ReservationInput, 'email'>,
  options: { readonly repair: boolean },
): Promise<{ readonly outcome: ReservationAudit; readonly email: string | null }> {
  const employee = await employeeState(store, input.tenantId, input.employeeId);
  if (employee.kind !== 'hired') return { outcome: 'gone', email: null };
  const { email } = employee;
  const { streamId, holder, expected } = await readAddress(store, { ...input, email });
  if (holder?.employeeId === input.employeeId) return { outcome: 'ok', email };
  if (holder) {
    const other = await employeeState(store, input.tenantId, holder.employeeId);
    if (other.kind === 'hired' && normaliseEmail(other.email) === normaliseEmail(email)) return { outcome: 'shared', email };
    // The holder does not have the address: orphaned once past the grace (isOrphaned, without reading it again).
    if (withinGrace(holder, input.now)) return { outcome: 'busy', email };
  }
  if (!options.repair) return { outcome: 'missing', email };
  // At the revision read: if anything reserved or released the address meanwhile, the append is
  // refused and the address is left as it now is, reported `busy` (a run again looks at it afresh).
  let appended;
  try {
    appended = await store.append(streamId, [reservedEvent({ ...input, email })], { expectedRevision: expected });
  } catch (error) {
    if (error instanceof WrongExpectedRevisionError) return { outcome: 'busy', email };
    throw error;
  }
  // The employee may have moved to another address meanwhile (its email change found this one
  // not its own, so released nothing): then give it back, at the revision just written.
  const after = await employeeState(store, input.tenantId, input.employeeId);
  if (after.kind !== 'hired' || normaliseEmail(after.email) !== normaliseEmail(email)) {
    await store.append(streamId, [releasedEvent(input)], { expectedRevision: appended.nextRevision }).catch((error: unknown) => {
      if (!(error instanceof WrongExpectedRevisionError)) throw error;
    });
    return { outcome: 'busy', email };
  }
  return { outcome: 'repaired', email };
}
