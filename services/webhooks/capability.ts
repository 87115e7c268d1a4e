import type { DatabasePool } from '../../shared/db/pool.ts';
import type { V1Capability } from '../gateway/app.ts';
import { webhooksRoutes } from './routes.ts';
import type { SecretBox } from './secrets.ts';
import type { TargetPolicy } from './targets.ts';

/** The webhooks capability with its ports bound; mount it inside `authenticated(...)`. */
export function webhooksCapability(ports: {
  readonly pool: DatabasePool;
  readonly secrets: SecretBox;
  readonly targets: TargetPolicy;
}): V1Capability {
  return webhooksRoutes(ports);
}
