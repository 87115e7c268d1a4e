import { ErasedError, WrongExpectedRevisionError } from '../../shared/errors.ts';
import type { AppendRequest, EventMetadata, EventStore } from '../../shared/event-store/port.ts';
import { handleCommand, preconditionHolds, type CommandResult, type IfMatch } from '../commandHandler.ts';
import {
  employeeDecider,
  requireHired,
  type DeciderState,
  type EmployeeCommand,
  type CommandMetadata,
  type HireEmployee,
} from './decide.ts';
import { type EmployeeState, employeeStreamId, normaliseEmail, type EmployeeEvent, type EmployeeStatus } from './contract.ts';
import { hasLegacyReservation, newReservationRequest, planEmailChange, planReservation } from './emailReservation.ts';
import type { EmailHash } from '../../shared/personal-data/emailHash.ts';
import type { LegacyReservationsWatch } from './legacyReservations.ts';

/**
 * The employee use cases: each one is the generic command handler plus what a single stream
 * cannot guarantee on its own (the tenant-wide email reservation, the role lookup).
 */
export type EmployeeCommandPorts = {
  readonly store: EventStore;
  /** Fails with 422 when the tenant has no role with this id (owned by services/auth). */
  readonly assertRoleExists: (tenantId: string, roleId: string) => Promise<void>;
  /** The keyed hash an address's reservation stream is named by. */
  readonly emailHash: EmailHash;
  /** Whether first-form reservations may still exist (legacyReservations.ts); absent: always look. */
  readonly legacyReservations?: LegacyReservationsWatch | undefined;
};

export type EmployeeResult = CommandResult<EmployeeState, EmployeeEvent>;

export const eventMetadata = (m: CommandMetadata): EventMetadata => ({ tenantId: m.tenantId, actor: m.actor, occurredAt: m.now });

/** 410 for an erased employee, checked before anything else a command could answer (412, 422). */
const refuseErased = (state: DeciderState): void => {
  if (state.kind === 'erased') requireHired(state);
};

const run = (ports: EmployeeCommandPorts, employeeId: string, command: EmployeeCommand, ifMatch?: IfMatch) =>
  handleCommand(ports.store, employeeDecider, employeeStreamId(command.metadata.tenantId, employeeId), command, {
    metadata: eventMetadata(command.metadata),
    ifMatch,
    assertPresent: refuseErased,
  });

const reservation = (emailHash: EmailHash, metadata: CommandMetadata, email: string, employeeId: string) => ({
  emailHash,
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
  const held = reservation(ports.emailHash, command.metadata, email, employeeId);
  const hire = (reserve: AppendRequest) =>
    handleCommand(ports.store, employeeDecider, employeeStreamId(command.metadata.tenantId, employeeId), command, {
      metadata: eventMetadata(command.metadata),
      newStream: true,
      alongside: [reserve],
    });
  const fresh = newReservationRequest(held);
  // An address reserved under the first form of reservation streams is planned from that stream.
  const mayBeLegacy = (await ports.legacyReservations?.()) ?? true;
  if (!mayBeLegacy || !(await hasLegacyReservation(ports.store, held))) {
    try {
      // The common case, one atomic append: the address's reservation stream and the new
      // employee's stream (a fresh ULID), both expected not to exist.
      return await hire(fresh);
    } catch (error) {
      if (!(error instanceof WrongExpectedRevisionError && error.streamId === fresh.streamId)) throw error;
    }
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
 * A PATCH: with an email that moves the employee to another address, appended in one atomic
 * append with the reservation changes planned from that decision (new address reserved, old one
 * released; see emailReservation.ts). If the employee or an address moved meanwhile, nothing was
 * appended and the handler decides and plans again (or answers 412 when the client's If-Match
 * no longer holds). An unknown employee is a 404 from the decision, before any address is read.
 */
export function changeEmployeeDetails(
  ports: EmployeeCommandPorts,
  employeeId: string,
  command: Extract<EmployeeCommand, { type: 'ChangeEmployeeDetails' }>,
  ifMatch?: IfMatch,
): Promise<EmployeeResult> {
  return handleCommand(ports.store, employeeDecider, employeeStreamId(command.metadata.tenantId, employeeId), command, {
    metadata: eventMetadata(command.metadata),
    ifMatch,
    assertPresent: refuseErased,
    alongside: async (events) => {
      const move = addressMove(events);
      return move
        ? planEmailChange(ports.store, reservation(ports.emailHash, command.metadata, move.data.email, employeeId), move.data.previousEmail)
        : [];
    },
  });
}

export function changeEmployeeStatus(
  ports: EmployeeCommandPorts,
  employeeId: string,
  metadata: CommandMetadata,
  data: { status: EmployeeStatus; reason?: string; effectiveAt?: string },
  ifMatch?: IfMatch,
): Promise<EmployeeResult> {
  return run(ports, employeeId, { type: 'ChangeEmployeeStatus', data, metadata }, ifMatch);
}

/**
 * One employee as its stream says, right now: the events folded with the decider's `evolve`.
 * Single reads answer from this, so body and ETag reflect every acknowledged write;
 * the read model, which lags, serves only lists. Null when the tenant has no such employee
 * (the stream id carries the tenant, so another tenant's id is simply an empty stream); an
 * `ErasedError` (410) when the employee was erased.
 */
export async function loadEmployee(
  store: EventStore,
  tenantId: string,
  employeeId: string,
): Promise<{ readonly state: Extract<EmployeeState, { kind: 'hired' }>; readonly revision: number } | null> {
  const recorded = await store.readStream(employeeStreamId(tenantId, employeeId));
  // The store hands back what the decider's own events serialised to; this is that boundary.
  const state = recorded
    .map((e) => ({ type: e.type, data: e.data }) as EmployeeEvent)
    .reduce(employeeDecider.evolve, employeeDecider.initialState);
  if (state.kind === 'erased') requireHired(state); // 410: erased on purpose, not unknown
  // Fields that no longer open belong to an erased person whose erasure the log lacks (a restore
  // older than the key's destruction): gone all the same, not an employee with no name.
  if (state.kind === 'hired' && recorded.some((e) => e.redacted)) throw new ErasedError('This employee was erased');
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
  // An erased employee is a 410, and a stale If-Match a 412, before the role is looked at (not a
  // 422 for an unknown one).
  const recorded = await ports.store.readStream(employeeStreamId(metadata.tenantId, employeeId));
  refuseErased(
    recorded.map((e) => ({ type: e.type, data: e.data }) as EmployeeEvent).reduce(employeeDecider.evolve, employeeDecider.initialState),
  );
  preconditionHolds(ifMatch, recorded.length - 1);
  await ports.assertRoleExists(metadata.tenantId, roleId);
  return run(ports, employeeId, { type: 'AssignEmployeeRole', data: { roleId }, metadata }, ifMatch);
}
