import type { EventStore, GlobalPosition, StreamSeen } from '../../shared/event-store/port.ts';
import type { EmailHash } from '../../shared/personal-data/emailHash.ts';
import { normaliseEmail, type EmployeeEvent } from './contract.ts';
import { lastReserver } from './emailReservation.ts';

/**
 * The addresses whose logins an erasure forgets: every one the person had in their history (hired
 * at, changed to, changed from) as far as it still opens, read while their key is whole, but
 * those another employee reserved after them. A login at a former address is the person's as
 * much as the one at their last (made by `ops users create`, it stays where it was when their
 * email changes). An address someone reserved after them is that employee's: so is a login at it,
 * which stays there even once they move on to another address.
 *
 * Once the person's stream holds their erasure (a repeat), each address is judged as it stood
 * then, by who had reserved it last before the erasure: one hired there since (the erasure freed
 * the address) came after the person was gone, and does not make the login the person had there
 * any less theirs (a restore, or a crash before the erasure forgot it, can leave it there still,
 * with their password).
 *
 * Also answers the reservation streams as they were read: before an erasure, a hire at one of the
 * addresses after the read makes the answer stale (its login would be forgotten as the person's),
 * which the erasure checks in its transaction where it can (holdStreamsAsSeen).
 */
export async function addressesToForget(
  store: EventStore,
  person: {
    readonly emailHash: EmailHash;
    readonly tenantId: string;
    readonly employeeId: string;
    /** Their address as their history ends (null when it no longer opens). */
    readonly email: string | null;
    /** Where `EmployeeErased` stands in the log, when their stream holds it already. */
    readonly erasure: GlobalPosition | null;
  },
  history: readonly EmployeeEvent[],
): Promise<{ readonly addresses: string[]; readonly seen: readonly StreamSeen[] }> {
  const held = new Map<string, string>();
  // A field that no longer opens reads null whatever its type says (the key destroyed before).
  const add = (email: string | null) => {
    if (email !== null) held.set(normaliseEmail(email), email);
  };
  for (const event of history) {
    if (event.type === 'EmployeeHired') add(event.data.email);
    else if (event.type === 'EmployeeEmailChanged') {
      add(event.data.email);
      add(event.data.previousEmail);
    }
  }
  const addresses = [...held.values()];
  const reservers = await Promise.all(addresses.map((email) => lastReserver(store, { ...person, email }, person.erasure)));
  // An address no reservation ever bound (data from before reservations): their last is theirs,
  // as the erasure has always held; a former one may be another's now, unreserved as well.
  const last = person.email === null ? null : normaliseEmail(person.email);
  const theirs = (reserver: string | null, email: string) =>
    reserver === person.employeeId || (reserver === null && normaliseEmail(email) === last);
  return {
    addresses: addresses.filter((email, i) => theirs(reservers[i]?.employeeId ?? null, email)),
    seen: reservers.flatMap((r) => r.seen),
  };
}
