import type { FastifyInstance } from 'fastify';
import type { LightMyRequestResponse } from 'fastify';
import { createTestDatabase, type TestDatabase } from '../database.ts';
import { authHeaders, createTestApp, createTestAuth, provisionTenant, type TestTenant } from '../auth.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import type { RoleName } from '../../../services/auth/permissions.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { sealedEventStore, testEmailHash } from '../personalData.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { employeesProjection } from '../../../projections/employees/employeesProjection.ts';
import { employeesCapability } from '../../../services/employees/capability.ts';
import { roleAssignmentReactor } from '../../../services/auth/roleAssignmentReactor.ts';
import { waitFor } from '../waitFor.ts';
import { testDataKeys } from '../dataKeys.ts';

/** A fresh database, the live employees projector and the gateway with real auth in front. */
export type EmployeesHarness = {
  readonly db: TestDatabase;
  readonly store: EventStore;
  readonly app: FastifyInstance;
  readonly auth: AuthDeps;
  /** A fresh tenant and the headers of a caller with `role` in it. */
  tenant(role?: RoleName): Promise<{
    tenant: TestTenant;
    headers: Record<string, string>;
    as(role: RoleName | readonly string[]): Promise<Record<string, string>>;
  }>;
  close(): Promise<void>;
};

export async function createEmployeesHarness(options: { clock?: () => Date; readWaitMs?: number } = {}): Promise<EmployeesHarness> {
  const db = await createTestDatabase();
  // Behind the sealing boundary, as the composition root puts the store: the API and the
  // projectors see plain values, the log holds personal fields sealed.
  const store = sealedEventStore(createPostgresEventStore(db.pool, { listenUrl: db.url }), db.pool).store;
  const projector: ProjectorHandle = runProjection(db.pool, store, employeesProjection, { pollIntervalMs: 100 });
  const roles: ProjectorHandle = runProjection(db.pool, store, roleAssignmentReactor, { pollIntervalMs: 100 });
  await waitFor(() => readCheckpoint(db.pool, employeesProjection.name));
  await waitFor(() => readCheckpoint(db.pool, roleAssignmentReactor.name));
  const auth = await createTestAuth(db.pool);
  const app = await createTestApp(
    auth,
    employeesCapability(
      { pool: db.pool, eventStore: store, log: store, logInDatabase: true, emailHash: testEmailHash, dataKeys: testDataKeys(db.pool) },
      options,
    ),
  );
  return {
    db,
    store,
    app,
    auth,
    async tenant(role = 'hr_manager') {
      const tenant = await provisionTenant(db.pool);
      return {
        tenant,
        headers: await authHeaders(auth, tenant, role),
        as: (other: RoleName | readonly string[]) => authHeaders(auth, tenant, other),
      };
    },
    async close() {
      await app.close();
      await projector.stop();
      await roles.stop();
      await store.close();
      await db.drop();
    },
  };
}

/** Asserts an RFC 9457 problem with `status` and returns its body. */
export function expectProblem(response: LightMyRequestResponse, status: number): Record<string, unknown> {
  if (response.statusCode !== status) throw new Error(`expected ${status}, got ${response.statusCode}: ${response.body}`);
  const type = String(response.headers['content-type']);
  if (!type.startsWith('application/problem+json')) throw new Error(`expected a problem, got ${type}`);
  const body = response.json<Record<string, unknown>>();
  if (body.status !== status || typeof body.title !== 'string' || typeof body.type !== 'string') {
    throw new Error(`not a problem body: ${response.body}`);
  }
  return body;
}
