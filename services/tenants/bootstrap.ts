import type { Config } from '../../shared/config.ts';
import type { DatabasePool } from '../../shared/db/pool.ts';
import { provisionTenant } from './provision.ts';

/**
 * BOOTSTRAP_TENANT / _PLAN / _ADMIN_EMAIL / _ADMIN_PASSWORD: on start, create that tenant and
 * its admin if absent. Idempotent, so it may run on every start of every gateway; an existing
 * tenant's plan and an existing admin's password are left as they are.
 */
export async function bootstrapTenant(
  pool: DatabasePool,
  config: Pick<Config, 'BOOTSTRAP_TENANT' | 'BOOTSTRAP_PLAN' | 'BOOTSTRAP_ADMIN_EMAIL' | 'BOOTSTRAP_ADMIN_PASSWORD'>,
  logger: { info(context: object, message: string): void; warn(context: object, message: string): void },
): Promise<void> {
  const slug = config.BOOTSTRAP_TENANT;
  if (!slug) return;
  const admin =
    config.BOOTSTRAP_ADMIN_EMAIL && config.BOOTSTRAP_ADMIN_PASSWORD
      ? { email: config.BOOTSTRAP_ADMIN_EMAIL, password: config.BOOTSTRAP_ADMIN_PASSWORD }
      : undefined;
  const result = await provisionTenant(pool, { slug, plan: config.BOOTSTRAP_PLAN, ...(admin ? { admin } : {}) });
  if (result.offboarded) {
    logger.warn({ tenant: slug }, 'bootstrap tenant was offboarded: not provisioned (name another BOOTSTRAP_TENANT)');
    return;
  }
  logger.info(
    { tenant: slug, plan: result.tenant.plan, tenantCreated: result.created, adminCreated: result.adminCreated },
    result.created || result.adminCreated ? 'bootstrap tenant provisioned' : 'bootstrap tenant already present',
  );
}
