import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { expect } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../database.ts';
import { authHeaders, createTestApp, createTestAuth, provisionTenant, type TestTenant } from '../auth.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { START, type EventStore } from '../../../shared/event-store/port.ts';
import type { Projection } from '../../../shared/projections/projection.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { parsePosition } from '../../../shared/event-store/port.ts';
import { employeesProjection } from '../../../projections/employees/employeesProjection.ts';
import { workforceProjection } from '../../../projections/workforce/workforceProjection.ts';
import { employeesCapability } from '../../../services/employees/capability.ts';
import { analyticsRoutes } from '../../../services/analytics/routes.ts';
import { testEmailHash } from '../personalData.ts';
import { testDataKeys } from '../dataKeys.ts';

/**
 * A fresh database, the employees and workforce projectors, and a gateway with the employees and
 * analytics routes behind real auth. One clock drives both (`setNow`): commands are recorded at
 * it, and it is the `now` of the workforce reads.
 */
export type WorkforceHarness = {
  readonly db: TestDatabase;
  readonly store: EventStore;
  readonly app: FastifyInstance;
  readonly auth: AuthDeps;
  setNow(iso: string): void;
  tenant(): Promise<{ tenant: TestTenant; hr: Record<string, string>; analyst: Record<string, string> }>;
  /** Waits until the workforce projection has applied the write at `position` (an X-Log-Position). */
  settle(position: string): Promise<void>;
  close(): Promise<void>;
};

export async function createWorkforceHarness(): Promise<WorkforceHarness> {
  const db = await createTestDatabase();
  const store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  let now = Date.now();
  const projections: readonly Projection[] = [employeesProjection, workforceProjection];
  const projectors: ProjectorHandle[] = projections.map((p) =>
    runProjection(db.pool, store, p, { pollIntervalMs: 50, onError: (error) => console.error(p.name, error) }),
  );
  let app: FastifyInstance | undefined;
  const close = async () => {
    await app?.close();
    for (const p of projectors) await p.stop();
    await store.close();
    await db.drop();
  };
  try {
    for (const p of projections) await waitForCheckpoint(db.pool, p.name, START, 20_000);
    const auth = await createTestAuth(db.pool);
    app = await createTestApp(
      auth,
      employeesCapability(
        { pool: db.pool, eventStore: store, log: store, logInDatabase: true, emailHash: testEmailHash, dataKeys: testDataKeys(db.pool) },
        { clock: () => new Date(now), readWaitMs: 5_000 },
      ),
      analyticsRoutes({ pool: db.pool, store, now: () => now, readWaitMs: 5_000 }),
    );
    const ready = app;
    return {
      db,
      store,
      app: ready,
      auth,
      setNow: (iso) => {
        now = Date.parse(iso);
      },
      async tenant() {
        const tenant = await provisionTenant(db.pool);
        return { tenant, hr: await authHeaders(auth, tenant, 'hr_manager'), analyst: await authHeaders(auth, tenant, 'analyst') };
      },
      async settle(position) {
        const at = parsePosition(position);
        if (!at) throw new Error(`not a position: ${position}`);
        expect(await waitForCheckpoint(db.pool, workforceProjection.name, at, 20_000)).toBe(true);
      },
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

/** Asserts a 2xx and returns the body. */
export function ok<T>(response: LightMyRequestResponse): T {
  expect(response.statusCode, response.body).toBeLessThan(300);
  return response.json<T>();
}
