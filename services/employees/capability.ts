import { withTenant, type DatabasePool } from '../../shared/db/pool.ts';
import type { EventStore } from '../../shared/event-store/port.ts';
import type { TenantReader } from '../../shared/db/tenantReader.ts';
import type { EmailHash } from '../../shared/personal-data/emailHash.ts';
import { assertRoleExists } from '../auth/roles.ts';
import type { V1Capability } from '../gateway/app.ts';
import { watchLegacyReservations } from './legacyReservations.ts';
import { employeesRoutes, type EmployeesRoutesDeps } from './routes.ts';

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
    readonly emailHash: EmailHash;
  },
  options: Pick<EmployeesRoutesDeps, 'clock' | 'readWaitMs'> = {},
): V1Capability {
  const { pool, eventStore, tenantReader, emailHash } = ports;
  return employeesRoutes({
    pool,
    tenantReader,
    store: eventStore,
    emailHash,
    legacyReservations: watchLegacyReservations(pool),
    assertRoleExists: async (tenantId, roleId) => {
      await withTenant(pool, tenantId, (tx) => assertRoleExists(tx, tenantId, roleId));
    },
    ...options,
  });
}
