import { withTenant, type DatabasePool, type Queryable } from '../../shared/db/pool.ts';
import type { EventStore } from '../../shared/event-store/port.ts';
import type { DataKeyStore } from '../../shared/personal-data/dataKeys.ts';
import type { TenantReader } from '../../shared/db/tenantReader.ts';
import type { EmailHash } from '../../shared/personal-data/emailHash.ts';
import { assertRoleExists } from '../auth/roles.ts';
import type { V1Capability } from '../gateway/app.ts';
import { watchLegacyReservations } from './legacyReservations.ts';
import { employeesRoutes, type EmployeesRoutesDeps } from './routes.ts';
import { forgetAccount } from '../auth/forgetAccount.ts';
import { forgetEmployeeLogins, ROLE_REACTOR_LOGINS } from '../auth/roleAssignmentReactor.ts';
import { eraseEmployee, type ErasedPerson, type ErasurePorts } from './erasure.ts';

/**
 * The employees capability with its ports bound: roles are checked where they live
 * (services/auth). `users.role_id` is the one source of truth for a person's role; the employee
 * stream's `EmployeeRoleAssigned` is the decision, which services/auth/roleAssignmentReactor.ts
 * applies to the user (a reaction on the projection runner: retried, idempotent).
 * Mount it inside `authenticated(...)`, which sets `request.auth` and checks `config.permission`.
 */
export function employeesCapability(
  ports: {
    readonly pool: DatabasePool;
    readonly tenantReader?: TenantReader;
    readonly eventStore: EventStore;
    /** The same log without the sealing boundary (see ErasurePorts). */
    readonly log: EventStore;
    readonly emailHash: EmailHash;
    /** False when the log is not in `pool`'s database (KurrentDB): see ErasurePorts. */
    readonly logInDatabase: boolean;
    /** The per-employee data keys: an erasure destroys one. */
    readonly dataKeys: Pick<DataKeyStore, 'destroy'>;
  },
  options: Pick<EmployeesRoutesDeps, 'clock' | 'readWaitMs'> = {},
): V1Capability {
  const { pool, eventStore, tenantReader, emailHash } = ports;
  const erasure = erasurePorts({
    store: eventStore,
    log: ports.log,
    pool,
    emailHash,
    dataKeys: ports.dataKeys,
    logInDatabase: ports.logInDatabase,
  });
  return employeesRoutes({
    pool,
    tenantReader,
    store: eventStore,
    emailHash,
    legacyReservations: watchLegacyReservations(pool, { logInDatabase: ports.logInDatabase }),
    assertRoleExists: async (tenantId, roleId) => {
      await withTenant(pool, tenantId, (tx) => assertRoleExists(tx, tenantId, roleId));
    },
    erase: (employeeId, metadata) => eraseEmployee(erasure, employeeId, metadata),
    ...options,
  });
}

/** The erasure's ports, bound here for the route and the ops commands alike. */
export function erasurePorts(ports: {
  readonly store: EventStore;
  readonly log: EventStore;
  readonly pool: DatabasePool;
  readonly emailHash: EmailHash;
  readonly dataKeys: Pick<DataKeyStore, 'destroy'>;
  readonly logInDatabase: boolean;
}): ErasurePorts {
  const { store, log, pool, emailHash, dataKeys, logInDatabase } = ports;
  return {
    store,
    log,
    pool,
    emailHash,
    logInDatabase,
    forget: async (tx: Queryable, person: ErasedPerson) => {
      // The key's destruction is the erasure: every sealed field of the person becomes unreadable at once.
      await dataKeys.destroy(person.tenantId, person.employeeId, tx);
      // The person's logins forget them too. Those the role reactor gave a role, exactly, under
      // whatever address the person had then; and those at every address they held, however they
      // were made (a reactor behind has not recorded its own yet; one made by hand is theirs as
      // well, and stays at the address it was made at when their email changes). Left with the
      // address, such a login would be handed the role of the next person hired there, with the
      // erased person's password. The reactor forgets what it gives them up to the erasure itself
      // when it meets the erasure. A repeated erasure leaves a login made at a freed address since:
      // the next holder's (ErasedPerson's loginsMadeBy).
      await forgetEmployeeLogins(tx, ROLE_REACTOR_LOGINS, person.tenantId, [person.employeeId]);
      for (const email of person.addresses) await forgetAccount(tx, person.tenantId, email, person.loginsMadeBy);
    },
  };
}
