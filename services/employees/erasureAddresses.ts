import type { EventStore } from '../../shared/event-store/port.ts';
import type { EmailHash } from '../../shared/personal-data/emailHash.ts';
import { normaliseEmail, type EmployeeEvent } from './contract.ts';
import { reservationHolder } from './emailReservation.ts';

/**
 * The addresses whose logins an erasure forgets: every one the person had in their history (hired
 * at, changed to, changed from) as far as it still opens, read while their key is whole, but for
 * those another employee holds now. A login at a former address is the person's as much as the one
 * at their last (made by `ops users create`, it stays where it was when their email changes); a
 * login at an address someone else has taken since is that employee's, or is to be given their role.
 */
export async function addressesToForget(
  store: EventStore,
  person: { readonly emailHash: EmailHash; readonly tenantId: string; readonly employeeId: string },
  history: readonly EmployeeEvent[],
): Promise<string[]> {
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
  const holders = await Promise.all(addresses.map((email) => reservationHolder(store, { ...person, email })));
  return addresses.filter((_, i) => holders[i] === null || holders[i] === person.employeeId);
}
