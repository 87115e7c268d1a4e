import { randomUUID } from 'node:crypto';
import { ignoredRows, sql, type DatabasePool, type Queryable } from '../../shared/db/pool.ts';
import { WrongExpectedRevisionError } from '../../shared/errors.ts';
import type { AppendRequest, AppendResult, EventStore, GlobalPosition } from '../../shared/event-store/port.ts';
import { appendInTransaction, holdStreamsAsSeen } from '../../shared/event-store/postgres/appendInTransaction.ts';
import { MissingDataKeyError } from '../../shared/event-store/sealing.ts';
import type { EmailHash } from '../../shared/personal-data/emailHash.ts';
import { withFieldsNull } from '../../shared/personal-data/policy.ts';
import { holdParkedStreams, redactParkedStreams } from '../../shared/projections/parkedRedactions.ts';
import { eventMetadata } from './commands.ts';
import {
  EMPLOYEE_PERSONAL_FIELDS,
  PERSONAL_FIELDS,
  employeePersonalData,
  employeeStreamId,
  evolve,
  initialState,
  type EmployeeEvent,
  type EmployeeState,
} from './contract.ts';
import { employeeDecider, type CommandMetadata } from './decide.ts';
import { planRelease } from './emailReservation.ts';
import { addressesToForget } from './erasureAddresses.ts';
import { recordErasure } from './erasureLedger.ts';

/** The person an erasure forgets, as their stream last showed them before it. */
export type ErasedPerson = {
  readonly tenantId: string;
  readonly employeeId: string;
  readonly erasedAt: string;
  /**
   * The addresses whose logins are theirs to forget: every one they held, while it can still be
   * read (none once it cannot: erased before, key gone), but those another employee reserved
   * after them (before their erasure, when this one repeats it).
   */
  readonly addresses: readonly string[];
  /**
   * Null: every login at `addresses` is theirs. Set when the erasure repeats one in the log (ISO
   * 8601, when the log recorded it): only the logins made by then are. The erasure freed the
   * addresses, so one made there since is the next holder's, and has no password of the person's.
   */
  readonly loginsMadeBy: string | null;
};

export type ErasurePorts = {
  readonly store: EventStore;
  /**
   * The same log without the sealing boundary: read when a stream's sealed fields have no key at
   * all (MissingDataKeyError), which an erasure treats like a destroyed key.
   */
  readonly log: EventStore;
  readonly pool: DatabasePool;
  /** The keyed hash the address's reservation stream is named by. */
  readonly emailHash: EmailHash;
  /**
   * True when `store` is the PostgreSQL adapter on `pool`'s database: `EmployeeErased` is then
   * appended in the same transaction as everything else the erasure does, and one commit makes
   * the whole erasure true. False (KurrentDB): the event is appended first and the rest follows
   * in one transaction; a crash in between is finished by the next erasure request or by
   * `ops employees reapply-erasures`, which finds the event in the log.
   */
  readonly logInDatabase: boolean;
  /** What else forgets the person, in the erasure's transaction (their data key, their logins). Idempotent. */
  readonly forget: (tx: Queryable, person: ErasedPerson) => Promise<void>;
};

export type ErasureResult = {
  readonly id: string;
  readonly erasedAt: string;
  /** Of the employee's stream's last event, for read-your-writes. */
  readonly position: GlobalPosition | null;
  /** False when the employee was erased before (nothing appended this time). */
  readonly fresh: boolean;
};

/**
 * Attempts after a lost race on the employee's stream, their address's, or an address they held
 * before (as the command handler's retries).
 */
const MAX_ATTEMPTS = 6;

const fold = (events: readonly EmployeeEvent[]): EmployeeState => events.reduce(evolve, initialState);

/**
 * Erases an employee: `EmployeeErased` on their stream and the release of their address's
 * reservation (the address is free again) in one atomic append, with the ledger entry and
 * `forget` in the same transaction. Idempotent: on an employee erased already it appends nothing,
 * answers the first `erasedAt` and does the rest again (each step is idempotent), so a repeated
 * request also completes an erasure that a crash interrupted. 404 for an unknown employee.
 */
export async function eraseEmployee(ports: ErasurePorts, employeeId: string, metadata: CommandMetadata): Promise<ErasureResult> {
  const { tenantId } = metadata;
  const streamId = employeeStreamId(tenantId, employeeId);
  for (let attempt = 1; ; attempt++) {
    const recorded = await readForErasure(ports, streamId);
    // The store hands back what the decider's own events serialised to; this is that boundary.
    const history = recorded.map((e) => ({ type: e.type, data: e.data }) as EmployeeEvent);
    const state = history.reduce(employeeDecider.evolve, employeeDecider.initialState);
    const events = employeeDecider.decide({ type: 'EraseEmployee', data: {}, metadata }, state);
    // The person as last seen before any erasure: whom a repeated erasure still has to forget
    // (a backup restored under a log that holds the erasure brings their login and key back).
    const person = fold(history.filter((e) => e.type !== 'EmployeeErased'));
    // A field that no longer opens reads null whatever its type says (a key destroyed by an
    // erasure whose event a restored log lacks): then there is no address to release.
    const email: string | null = person.kind === 'hired' ? (person.email as string | null) : null;
    // Erased before: what was theirs is judged as it stood at that erasure, not by who came since.
    const erasedBefore = recorded.find((e) => e.type === 'EmployeeErased') ?? null;
    // Read before the transaction, as the release is planned: the reservations are streams of the log.
    const { addresses, seen } = await addressesToForget(
      ports.store,
      { emailHash: ports.emailHash, tenantId, employeeId, email, erasure: erasedBefore?.position ?? null },
      history,
    );
    if (state.kind === 'erased' && events.length === 0) {
      // An event without a time of its own (a store that answers the epoch) judges no login by it.
      const recordedAt = erasedBefore?.recordedAt;
      const loginsMadeBy = recordedAt !== undefined && Date.parse(recordedAt) > 0 ? recordedAt : null;
      const erased: ErasedPerson = { tenantId, employeeId, erasedAt: state.erasedAt, addresses, loginsMadeBy };
      // The addresses' streams are not held: they are judged as they stood at the erasure, and a
      // login made since is left by when it was made, so a hire there now changes neither.
      await ports.pool.transaction((tx) => completeErasure(tx, ports, erased));
      return { id: employeeId, erasedAt: erased.erasedAt, position: recorded.at(-1)?.position ?? null, fresh: false };
    }
    if (person.kind !== 'hired') throw new Error('an erasure was decided for an employee who is not hired');
    const erasedAt = metadata.now;
    const meta = eventMetadata(metadata);
    const release =
      email === null
        ? null
        : await planRelease(ports.store, { emailHash: ports.emailHash, tenantId, email, employeeId, now: metadata.now, metadata: meta });
    const requests: AppendRequest[] = [
      ...(release ? [release] : []),
      { streamId, events: events.map((e) => ({ id: randomUUID(), ...e, metadata: meta })), expectedRevision: recorded.length - 1 },
    ];
    const erased: ErasedPerson = { tenantId, employeeId, erasedAt, addresses, loginsMadeBy: null };
    try {
      let appended: AppendResult[];
      if (ports.logInDatabase) {
        appended = await ports.pool.transaction(async (tx) => {
          // Before the append: once this transaction holds rows of the log, every reader of the
          // log waits for it to commit, so it must not then wait for a projection's page (taken
          // again by completeErasure, at no cost).
          await holdParkedStreams(tx, [streamId]);
          // The addresses' streams with the append's, checked unmoved since they were read: a hire
          // at a former address in between would have its login forgotten as the person's. (With
          // the log elsewhere such a hire can still slip in.)
          await holdStreamsAsSeen(
            tx,
            seen,
            requests.map((r) => r.streamId),
          );
          const results = await appendInTransaction(tx, requests, employeePersonalData);
          await completeErasure(tx, ports, erased);
          return results;
        });
      } else {
        appended = await ports.store.appendMany(requests);
        await ports.pool.transaction((tx) => completeErasure(tx, ports, erased));
      }
      return { id: employeeId, erasedAt, position: appended.at(-1)?.position ?? null, fresh: true };
    } catch (error) {
      // The employee or the address moved meanwhile: nothing was appended; decided again.
      if (!(error instanceof WrongExpectedRevisionError) || attempt >= MAX_ATTEMPTS) throw error;
    }
  }
}

/**
 * The employee's stream, opened; with its personal fields null when the person's key is missing
 * altogether (a restored key table older than the log): nothing can open them any more, exactly
 * as after the key's destruction, so the erasure goes on rather than failing on them.
 */
async function readForErasure(ports: ErasurePorts, streamId: string) {
  try {
    return await ports.store.readStream(streamId);
  } catch (error) {
    if (!(error instanceof MissingDataKeyError)) throw error;
    return (await ports.log.readStream(streamId)).map((event) => {
      const fields: readonly string[] = EMPLOYEE_PERSONAL_FIELDS[event.type as keyof typeof EMPLOYEE_PERSONAL_FIELDS] ?? [];
      if (fields.length === 0 || typeof event.data !== 'object' || event.data === null) return event;
      return { ...event, data: withFieldsNull(event.data, fields), redacted: true as const };
    });
  }
}

/** The ledger entry and what `forget` does, in `tx`, for the person's tenant. */
async function completeErasure(tx: Queryable, ports: ErasurePorts, person: ErasedPerson): Promise<void> {
  // First, as it takes the parking lock before it writes: the erasure then holds no row a
  // projection's page could be waiting for (parkedRedactions.ts).
  await redactParkedStreams(tx, [employeeStreamId(person.tenantId, person.employeeId)], PERSONAL_FIELDS);
  // The tables `forget` touches are tenant-scoped (row-level security, forced): this transaction is the person's tenant's.
  await tx.query(sql.type(ignoredRows)`select set_config('app.tenant_id', ${person.tenantId}, true)`);
  await recordErasure(tx, person);
  await ports.forget(tx, person);
}
