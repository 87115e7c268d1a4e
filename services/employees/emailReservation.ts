import { createHash, randomUUID } from 'node:crypto';
import { ConflictError, WrongExpectedRevisionError } from '../../shared/errors.ts';
import type { AppendRequest, EventMetadata, EventStore, RecordedEvent } from '../../shared/event-store/port.ts';
import { employeeDecider, type EmployeeState } from './decide.ts';
import { employeeStreamId, normaliseEmail, type EmployeeEvent } from './events.ts';

/**
 * Email uniqueness per tenant without a unique index the event store does not have: one small
 * stream per normalised address. Whoever appends its first event (expected revision
 * `no_stream`) holds the address; everyone racing for it gets a revision conflict → 409. It
 * works the same on every adapter of the port, because it only uses optimistic concurrency.
 *
 * A reservation is released (an event, at its exact revision) when its owner's email changes;
 * a released one can be taken over at its exact revision. A reservation whose owner never got
 * hired (a crash between the two appends) or has since moved to another address (a crash before
 * the release) is orphaned once it is older than any command in flight (30 s), and is then taken
 * over the same way.
 *
 * Release rule (issue 10, defect 2): a reservation is released only by the call that made it.
 * `reserveEmail` says whether this call appended the reservation (`MadeReservation`, with the
 * revision it appended at) or found the employee already holding the address (`null`). A command
 * that fails afterwards undoes only its own reservation (`undoReservation`, at exactly that
 * revision); when it made none, it releases nothing: a stale PATCH of X to X's own address must
 * not free it. The only other release is the owner's, after its move to a new address succeeded.
 */
export type EmailReserved = { readonly type: 'EmployeeEmailReserved'; readonly data: { readonly employeeId: string; readonly email: string } };
export type EmailReleased = { readonly type: 'EmployeeEmailReleased'; readonly data: { readonly employeeId: string } };

/** Longer than any command between its reservation and its append to the employee stream. */
const IN_FLIGHT_GRACE_MS = 30_000;

export const emailReservationStreamId = (tenantId: string, email: string): string =>
  `employee-email-${tenantId}-${createHash('sha256').update(normaliseEmail(email)).digest('hex')}`;

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
 * A younger reservation may belong to a command still in flight (reserved, not yet appended to
 * the employee), so it is never taken over, whatever the owner's stream says yet.
 */
async function isOrphaned(store: EventStore, tenantId: string, email: string, holder: NonNullable<Holder>, now: string): Promise<boolean> {
  if (Date.parse(now) - Date.parse(holder.since) <= IN_FLIGHT_GRACE_MS) return false;
  const owner = await employeeState(store, tenantId, holder.employeeId);
  return owner.kind !== 'hired' || normaliseEmail(owner.email) !== normaliseEmail(email);
}

export type ReservationInput = {
  readonly tenantId: string;
  readonly email: string;
  readonly employeeId: string;
  /** The command's clock (ISO 8601). */
  readonly now: string;
  readonly metadata: EventMetadata;
};

const duplicate = (email: string) =>
  new ConflictError(`An employee with email ${email} already exists in this tenant`, { field: 'email' });

/**
 * The reservation of a never-used address, as one part of an atomic multi-stream append (a
 * create: reservation + new employee in one `appendMany`, no read). A conflict on it means the
 * address has a reservation already: then `reserveEmail` decides (held, released, orphaned).
 */
export function newReservationRequest(input: ReservationInput): AppendRequest {
  const { tenantId, email, employeeId, metadata } = input;
  const reserved: EmailReserved = { type: 'EmployeeEmailReserved', data: { employeeId, email: normaliseEmail(email) } };
  return { streamId: emailReservationStreamId(tenantId, email), events: [{ id: randomUUID(), ...reserved, metadata }], expectedRevision: 'no_stream' };
}

/** A reservation this call appended: the only thing its failure path may undo. */
export type MadeReservation = { readonly streamId: string; readonly revision: number };

/**
 * Holds `email` for `employeeId`, or fails with 409 when another employee holds it. Returns the
 * reservation it made, or null when `employeeId` already held the address (nothing to undo).
 */
export async function reserveEmail(store: EventStore, input: ReservationInput): Promise<MadeReservation | null> {
  const { tenantId, email, employeeId, metadata, now } = input;
  const streamId = emailReservationStreamId(tenantId, email);
  const reserved: EmailReserved = { type: 'EmployeeEmailReserved', data: { employeeId, email: normaliseEmail(email) } };
  const append = async (expectedRevision: 'no_stream' | number): Promise<MadeReservation> => {
    const appended = await store.append(streamId, [{ id: randomUUID(), ...reserved, metadata }], { expectedRevision });
    return { streamId, revision: appended.nextRevision };
  };
  try {
    // The common case: a new address. No read needed; the store refuses if it exists.
    return await append('no_stream');
  } catch (error) {
    if (!(error instanceof WrongExpectedRevisionError)) throw error;
  }
  const events = await store.readStream(streamId);
  const holder = currentHolder(events);
  if (holder?.employeeId === employeeId) return null;
  if (holder && !(await isOrphaned(store, tenantId, email, holder, now))) throw duplicate(email);
  try {
    return await append(events.length - 1);
  } catch (error) {
    if (error instanceof WrongExpectedRevisionError) throw duplicate(email);
    throw error;
  }
}

/** Gives `email` up if `employeeId` still holds it. Losing a race here means someone else took it over: fine. */
export async function releaseEmail(store: EventStore, input: ReservationInput): Promise<void> {
  const { tenantId, email, employeeId, metadata } = input;
  const streamId = emailReservationStreamId(tenantId, email);
  const events = await store.readStream(streamId);
  if (currentHolder(events)?.employeeId !== employeeId) return;
  const released: EmailReleased = { type: 'EmployeeEmailReleased', data: { employeeId } };
  try {
    await store.append(streamId, [{ id: randomUUID(), ...released, metadata }], { expectedRevision: events.length - 1 });
  } catch (error) {
    if (!(error instanceof WrongExpectedRevisionError)) throw error;
  }
}

/**
 * Undoes a reservation this call made (its command failed), at exactly the revision it made it:
 * if anything happened to the stream since, the reservation is no longer this call's to undo.
 */
export async function undoReservation(store: EventStore, made: MadeReservation | null, input: Pick<ReservationInput, 'employeeId' | 'metadata'>): Promise<void> {
  if (!made) return;
  const released: EmailReleased = { type: 'EmployeeEmailReleased', data: { employeeId: input.employeeId } };
  try {
    await store.append(made.streamId, [{ id: randomUUID(), ...released, metadata: input.metadata }], { expectedRevision: made.revision });
  } catch (error) {
    if (!(error instanceof WrongExpectedRevisionError)) throw error;
  }
}
