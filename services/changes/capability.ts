import type { DatabasePool } from '../../shared/db/pool.ts';
import type { V1Capability } from '../gateway/app.ts';
import { changesRoutes } from './routes.ts';
import { createChangeWakeups } from './wakeups.ts';

/**
 * The change feed capability with its ports bound: the pool for reads and a LISTEN
 * connection (opened on the first long-poll) that wakes waiting readers. Mount it inside
 * `authenticated(...)`; the LISTEN connection closes with the app.
 */
export function changesCapability(
  ports: { readonly pool: DatabasePool; readonly databaseUrl: string },
  options: { maxWaitSeconds?: number } = {},
): V1Capability {
  return async (v1) => {
    const wakeups = createChangeWakeups(ports.databaseUrl);
    v1.addHook('onClose', () => wakeups.close());
    await changesRoutes({ pool: ports.pool, wakeups, ...options })(v1);
  };
}
