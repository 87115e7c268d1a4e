import { PreconditionFailedError, WrongExpectedRevisionError } from '../../shared/errors.ts';
import type { AppendRequest, EventMetadata, EventStore } from '../../shared/event-store/port.ts';
import { assertIfMatch, handleCommand, type CommandResult, type IfMatch } from '../commandHandler.ts';
import { employeeDecider, type EmployeeCommand, type EmployeeState, type CommandMetadata, type HireEmployee } from './decide.ts';
import { employeeStreamId, normaliseEmail, type EmployeeEvent, type EmployeeStatus } from './events.ts';
import { newReservationRequest, planEmailChange, planReservation } from './emailReservation.ts';

/**
 * The employee use cases: each one is the generic command handler plus what a single stream
 * cannot guarantee on its own (the tenant-wide email reservation, the role lookup).
 */
export type EmployeeCommandPorts = {
  readonly store: EventStore;
  /** Fails with 422 when the tenant has no role with this id (owned by services/auth). */
  readonly assertRoleExists: (tenantId: string, roleId: string) => Promise<void>;
};

export type EmployeeResult = CommandResult<EmployeeState, EmployeeEvent>;

const eventMetadata = (m: CommandMetadata): EventMetadata => ({ tenantId: m.tenantId, actor: m.actor, occurredAt: m.now });

const run = (ports: EmployeeCommandPorts, employeeId: string, command: EmployeeCommand, ifMatch?: IfMatch) =>
  handleCommand(ports.store, employeeDecider, employeeStreamId(command.metadata.tenantId, employeeId), command, {
    metadata: eventMetadata(command.metadata),
    ifMatch,
  });

const reservation = (metadata: CommandMetadata, email: string, employeeId: string) => ({
  tenantId: metadata.tenantId,
  email,
  employeeId,
  now: metadata.now,
  metadata: eventMetadata(metadata),
});

/**
 * Attempts of an email command whose append lost a race on one of the streams it planned from
 * (the employee's, an address's); each attempt reads them again. Like the handler's retries.
 */
const MAX_ATTEMPTS = 6;

export async function hireEmployee(ports: EmployeeCommandPorts, command: HireEmployee): Promise<EmployeeResult> {
  const { employeeId, email, roleId } = command.data;
  if (roleId !== undefined) await ports.assertRoleExists(command.metadata.tenantId, roleId);
  const held = reservation(command.metadata, email, employeeId);
  const hire = (reserve: AppendRequest) =>
    handleCommand(ports.store, employeeDecider, employeeStreamId(command.metadata.tenantId, employeeId), command, {
      metadata: eventMetadata(command.metadata),
      newStream: true,
      alongside: [reserve],
    });
  const fresh = newReservationRequest(held);
  try {
    // The common case, one atomic append and no read: the address's reservation stream and the
    // new employee's stream (a fresh ULID), both expected not to exist.
    return await hire(fresh);
  } catch (error) {
    if (!(error instanceof WrongExpectedRevisionError && error.streamId === fresh.streamId)) throw error;
  }
  // The address has a reservation stream already (held → 409, released, or orphaned): the
  // reservation is planned from it and appended with the hire, still in one atomic append.
  for (let attempt = 1; ; attempt++) {
    const reserve = await planReservation(ports.store, held);
    try {
      return await hire(reserve);
    } catch (error) {
      if (!(error instanceof WrongExpectedRevisionError && error.streamId === reserve.streamId) || attempt >= MAX_ATTEMPTS) throw error;
    }
  }
}

/** An email change that moves the employee to another address (not just another spelling of it). */
const addressMove = (events: readonly EmployeeEvent[]) =>
  events.find(
    (e): e is Extract<EmployeeEvent, { type: 'EmployeeEmailChanged' }> =>
      e.type === 'EmployeeEmailChanged' && normaliseEmail(e.data.previousEmail) !== normaliseEmail(e.data.email),
  );

/**
 * A PATCH with an email: decided on the employee's stream as read, and appended in one atomic
 * append with the reservation changes planned for that decision (new address reserved, old one
 * released; see emailReservation.ts). The generic handler runs with `ifMatch` pinned to the
 * revision that was planned from, so it decides on exactly that state; if anything moved (the
 * employee: the pin's 412; an address: its revision conflict) nothing was appended, and the
 * command is read and planned again, or answered 412 when the client's own If-Match is now stale.
 */
export async function changeEmployeeDetails(
  ports: EmployeeCommandPorts,
  employeeId: string,
  command: Extract<EmployeeCommand, { type: 'ChangeEmployeeDetails' }>,
  ifMatch?: IfMatch,
): Promise<EmployeeResult> {
  const { email } = command.data;
  if (email === undefined) return run(ports, employeeId, command, ifMatch);
  const streamId = employeeStreamId(command.metadata.tenantId, employeeId);
  for (let attempt = 1; ; attempt++) {
    const recorded = await ports.store.readStream(streamId);
    const revision = recorded.length - 1;
    // The revisions this attempt accepts: the one read, if the client's If-Match accepts it. When
    // none, the handler answers 412 before anything else, so a stale If-Match is a 412 before
    // the address is looked at (not a 409 for a taken one).
    const pinned = ifMatch === undefined || ifMatch.includes(revision) ? [revision] : [];
    let alongside: AppendRequest[] = [];
    if (pinned.length > 0) {
      const state = recorded.map((e) => ({ type: e.type, data: e.data }) as EmployeeEvent).reduce(employeeDecider.evolve, employeeDecider.initialState);
      // The decision first: an unknown employee is a 404 before any reservation is read or written.
      const move = addressMove(employeeDecider.decide(command, state));
      if (move) alongside = await planEmailChange(ports.store, reservation(command.metadata, move.data.email, employeeId), move.data.previousEmail);
    }
    try {
      return await handleCommand(ports.store, employeeDecider, streamId, command, { metadata: eventMetadata(command.metadata), ifMatch: pinned, alongside });
    } catch (error) {
      // The employee moved since the plan: plan again when the client's If-Match (none, or a
      // list) still accepts where it is now; otherwise the 412 is the client's answer.
      const employeeMoved = error instanceof PreconditionFailedError && pinned.length > 0 && (ifMatch === undefined || ifMatch.includes(revisionIn(error)));
      const addressMoved = error instanceof WrongExpectedRevisionError && alongside.some((r) => r.streamId === error.streamId);
      if (!employeeMoved && !addressMoved) throw error;
      if (attempt >= MAX_ATTEMPTS) {
        // A client that sent no If-Match gets the handler's answer to endless races, never a 412.
        throw error instanceof WrongExpectedRevisionError ? error : new WrongExpectedRevisionError(streamId, String(revision), currentRevisionOf(error));
      }
    }
  }
}

/** The revision a 412 reports the employee at (-1 when its stream is gone or unknown). */
const revisionIn = (error: PreconditionFailedError): number => {
  const current = error.extras.currentRevision;
  return typeof current === 'number' ? current : -1;
};

const currentRevisionOf = (error: PreconditionFailedError): number | 'no_stream' => {
  const current = revisionIn(error);
  return current >= 0 ? current : 'no_stream';
};

export function changeEmployeeStatus(
  ports: EmployeeCommandPorts,
  employeeId: string,
  metadata: CommandMetadata,
  data: { status: EmployeeStatus; reason?: string },
  ifMatch?: IfMatch,
): Promise<EmployeeResult> {
  return run(ports, employeeId, { type: 'ChangeEmployeeStatus', data, metadata }, ifMatch);
}


/**
 * One employee as its stream says, right now: the events folded with the decider's `evolve`.
 * Single reads answer from this (defect 3), so body and ETag reflect every acknowledged write;
 * the read model, which lags, serves only lists. Null when the tenant has no such employee
 * (the stream id carries the tenant, so another tenant's id is simply an empty stream).
 */
export async function loadEmployee(
  store: EventStore,
  tenantId: string,
  employeeId: string,
): Promise<{ readonly state: Extract<EmployeeState, { kind: 'hired' }>; readonly revision: number } | null> {
  const recorded = await store.readStream(employeeStreamId(tenantId, employeeId));
  // The store hands back what the decider's own events serialised to; this is that boundary.
  const state = recorded.map((e) => ({ type: e.type, data: e.data }) as EmployeeEvent).reduce(employeeDecider.evolve, employeeDecider.initialState);
  return state.kind === 'hired' ? { state, revision: recorded.length - 1 } : null;
}

/** Records the decision to give the employee's person `roleId` (applied to the user by the role reactor). */
export async function assignEmployeeRole(
  ports: EmployeeCommandPorts,
  employeeId: string,
  metadata: CommandMetadata,
  roleId: string,
  ifMatch?: IfMatch,
): Promise<EmployeeResult> {
  // A stale If-Match is a 412 before the role is looked at (not a 422 for an unknown one).
  await assertIfMatch(ports.store, employeeStreamId(metadata.tenantId, employeeId), ifMatch);
  await ports.assertRoleExists(metadata.tenantId, roleId);
  return run(ports, employeeId, { type: 'AssignEmployeeRole', data: { roleId }, metadata }, ifMatch);
}
