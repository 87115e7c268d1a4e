
import { WrongExpectedRevisionError } from '../../shared/errors.ts';
import type { EventMetadata, EventStore } from '../../shared/event-store/port.ts';
import { assertIfMatch, handleCommand, type CommandResult, type IfMatch } from '../commandHandler.ts';
import { employeeDecider, type EmployeeCommand, type EmployeeState, type CommandMetadata, type HireEmployee } from './decide.ts';
import { employeeStreamId, normaliseEmail, type EmployeeEvent, type EmployeeStatus } from './events.ts';
import { newReservationRequest, releaseEmail, reserveEmail, undoReservation } from './emailReservation.ts';

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

export async function hireEmployee(ports: EmployeeCommandPorts, command: HireEmployee): Promise<EmployeeResult> {
  const { employeeId, email, roleId } = command.data;
  if (roleId !== undefined) await ports.assertRoleExists(command.metadata.tenantId, roleId);
  const held = reservation(command.metadata, email, employeeId);
  const reserve = newReservationRequest(held);
  try {
    // The common case, one atomic append and no read: the address's reservation stream and the
    // new employee's stream (a fresh ULID), both expected not to exist.
    return await handleCommand(ports.store, employeeDecider, employeeStreamId(command.metadata.tenantId, employeeId), command, {
      metadata: eventMetadata(command.metadata),
      newStream: true,
      alongside: [reserve],
    });
  } catch (error) {
    if (!(error instanceof WrongExpectedRevisionError && error.streamId === reserve.streamId)) throw error;
  }
  // The address has a reservation stream already (held, released, or orphaned by a crash):
  // `reserveEmail` decides; then the employee's append, releasing the address if that fails.
  // Only a reservation this call made may be undone when the command fails (defect 2).
  const made = await reserveEmail(ports.store, held);
  try {
    return await run(ports, employeeId, command);
  } catch (error) {
    await undoReservation(ports.store, made, held).catch(() => undefined);
    throw error;
  }
}

export async function changeEmployeeDetails(
  ports: EmployeeCommandPorts,
  employeeId: string,
  command: Extract<EmployeeCommand, { type: 'ChangeEmployeeDetails' }>,
  ifMatch?: IfMatch,
): Promise<EmployeeResult> {
  const { email } = command.data;
  if (email === undefined) return run(ports, employeeId, command, ifMatch);
  // A stale If-Match is a 412 before the address is looked at (not a 409 for a taken one).
  await assertIfMatch(ports.store, employeeStreamId(command.metadata.tenantId, employeeId), ifMatch);
  // Hold the new address before the employee moves to it; give the old one up afterwards.
  // A crash in between leaves an orphaned reservation that the next claimant takes over.
  // Only a reservation this call made may be undone when the command fails (defect 2).
  const made = await reserveEmail(ports.store, reservation(command.metadata, email, employeeId));
  let result: EmployeeResult;
  try {
    result = await run(ports, employeeId, command, ifMatch);
  } catch (error) {
    await undoReservation(ports.store, made, reservation(command.metadata, email, employeeId)).catch(() => undefined);
    throw error;
  }
  for (const event of result.events) {
    if (event.type === 'EmployeeEmailChanged' && normaliseEmail(event.data.previousEmail) !== normaliseEmail(event.data.email)) {
      await releaseEmail(ports.store, reservation(command.metadata, event.data.previousEmail, employeeId));
    }
  }
  return result;
}

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
