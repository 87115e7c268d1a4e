import type { FastifyInstance } from 'fastify';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { START, type EventStore } from '../../../shared/event-store/port.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { kpiBillingProjection } from '../../../projections/kpi/billingProjection.ts';
import { analyticsRoutes } from '../../../services/analytics/routes.ts';
import { billingRoutes } from '../../../services/billing/routes.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { createTestDatabase, type TestDatabase } from '../database.ts';
import { createTestApp, createTestAuth } from '../auth.ts';

/** The body of `GET /v1/analytics/kpi`. */
export type Kpi = {
  mrr: number;
  arr: number;
  churnRate: number;
  dau: number;
  mau: number;
  apiLatencyP95Ms: number;
  asOf: string;
  currency: string | null;
};

export type AnalyticsHarness = {
  readonly db: TestDatabase;
  readonly store: EventStore;
  readonly auth: AuthDeps;
  readonly app: FastifyInstance;
  close(): Promise<void>;
};

/**
 * A fresh database, the billing projector (built before it returns) and a gateway with the
 * analytics and billing routes behind real auth. No usage hook: the only usage is what a test seeds.
 */
export async function createAnalyticsHarness(): Promise<AnalyticsHarness> {
  const db = await createTestDatabase();
  const store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  let projector: ProjectorHandle | undefined;
  let app: FastifyInstance | undefined;
  const close = async () => {
    await app?.close();
    await projector?.stop();
    await store.close();
    await db.drop();
  };
  try {
    const auth = await createTestAuth(db.pool);
    projector = runProjection(db.pool, store, kpiBillingProjection, { pollIntervalMs: 50 });
    await waitForCheckpoint(db.pool, kpiBillingProjection.name, START, 20_000);
    app = await createTestApp(auth, analyticsRoutes({ pool: db.pool, store, readWaitMs: 5_000 }), billingRoutes({ store }));
    return { db, store, auth, app, close };
  } catch (error) {
    await close();
    throw error;
  }
}
