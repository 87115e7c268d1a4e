import type { FastifyInstance } from 'fastify';
import { sealedEventStore, testEmailHash } from '../personalData.ts';
import { createTestDatabase, type TestDatabase } from '../database.ts';
import { authHeaders, createTestApp, createTestAuth, provisionTenant, type TestTenant } from '../auth.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { START, type EventStore, type GlobalPosition } from '../../../shared/event-store/port.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { changesProjection } from '../../../projections/changes/changesProjection.ts';
import { changesCapability } from '../../../services/changes/capability.ts';
import { changeEmployeeDetails, hireEmployee } from '../../../services/employees/commands.ts';
import { parseEmployeeStreamId, EMPLOYEE_EVENT_TYPES } from '../../../services/employees/contract.ts';
import { monotonicFactory } from 'ulid';
import type { V1Capability } from '../../../services/gateway/app.ts';
import { waitFor } from '../waitFor.ts';

export type ChangesHarness = {
  readonly db: TestDatabase;
  readonly store: EventStore;
  readonly app: FastifyInstance;
  readonly auth: AuthDeps;
  projector: ProjectorHandle;
  tenant(): Promise<{ tenant: TestTenant; headers: Record<string, string> }>;
  /** The tenant's change cursors in feed order, once the feed holds `count` (what a webhook endpoint must receive, in this order). */
  feedCursors(headers: Record<string, string>, count: number): Promise<string[]>;
  close(): Promise<void>;
};

/** A fresh database, the live changes projector and a gateway with the feed (and `extra`) behind real auth. */
export async function createChangesHarness(...extra: Array<(db: TestDatabase) => V1Capability>): Promise<ChangesHarness> {
  const db = await createTestDatabase();
  // Behind the sealing boundary, as the composition root puts the store.
  const store = sealedEventStore(createPostgresEventStore(db.pool, { listenUrl: db.url }), db.pool).store;
  const projector = runProjection(db.pool, store, changesProjection, { pollIntervalMs: 100 });
  await waitFor(() => readCheckpoint(db.pool, changesProjection.name));
  const auth = await createTestAuth(db.pool);
  const app = await createTestApp(auth, changesCapability({ pool: db.pool, databaseUrl: db.url }), ...extra.map((make) => make(db)));
  const harness: ChangesHarness = {
    db,
    store,
    app,
    auth,
    projector,
    async tenant() {
      const tenant = await provisionTenant(db.pool);
      return { tenant, headers: await authHeaders(auth, tenant, 'employee') };
    },
    feedCursors: (headers, count) =>
      waitFor(async () => {
        const response = await app.inject({ method: 'GET', url: '/v1/employees/changes?limit=1000', headers });
        const cursors = response.json<{ data: Array<{ cursor: string }> }>().data.map((c) => c.cursor);
        return cursors.length >= count ? cursors : undefined;
      }),
    async close() {
      await app.close();
      await harness.projector.stop();
      await auth.close();
      await store.close();
      await db.drop();
    },
  };
  return harness;
}

const nextId = monotonicFactory();
const noRoles = async () => undefined;

/** Writes through the command handler: hires an employee, returns a function that renames them (one event each). */
export async function hire(store: EventStore, tenantId: string, label: string) {
  const employeeId = nextId();
  const metadata = () => ({ tenantId, actor: 'test', now: new Date().toISOString() });
  await hireEmployee(
    { store, assertRoleExists: noRoles, emailHash: testEmailHash },
    {
      type: 'HireEmployee',
      data: { employeeId, email: `${label}-${employeeId.toLowerCase()}@example.test`, firstName: `${label}-0`, lastName: 'Test' },
      metadata: metadata(),
    },
  );
  return {
    employeeId,
    rename: (firstName: string) =>
      changeEmployeeDetails({ store, assertRoleExists: noRoles, emailHash: testEmailHash }, employeeId, {
        type: 'ChangeEmployeeDetails',
        data: { firstName },
        metadata: metadata(),
      }),
  };
}

/** The tenant's employee events as the log orders them: what the feed must show, exactly. */
export async function logPositionsOf(store: EventStore, tenantId: string): Promise<GlobalPosition[]> {
  const out: GlobalPosition[] = [];
  let after = START;
  for (;;) {
    const page = await store.readAll({ after, maxCount: 1000, eventTypes: EMPLOYEE_EVENT_TYPES });
    for (const e of page.events) if (parseEmployeeStreamId(e.streamId)?.tenantId === tenantId) out.push(e.position);
    if (page.checkpoint === after || (page.checkpoint.commit === after.commit && page.checkpoint.prepare === after.prepare)) return out;
    after = page.checkpoint;
  }
}
