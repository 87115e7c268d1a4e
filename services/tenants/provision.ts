import type { DatabasePool } from '../../shared/db/pool.ts';
import { ConflictError } from '../../shared/errors.ts';
import type { Plan, RateLimitOverride } from '../gateway/requestContext.ts';
import { ensureBuiltInRoles } from '../auth/roles.ts';
import { createUser } from '../auth/users.ts';
import { unlessOffboarded } from './offboardingLedger.ts';
import { ensureTenant, type Tenant } from './tenants.ts';

export type ProvisionTenantInput = {
  readonly slug: string;
  readonly name?: string;
  readonly plan: Plan;
  readonly rateLimitOverride?: RateLimitOverride | null;
  readonly admin?: { readonly email: string; readonly password: string };
};

export type ProvisionTenantResult = {
  readonly tenant: Tenant;
  readonly created: boolean;
  readonly adminCreated: boolean;
  /** The tenant was offboarded: nothing was provisioned (an offboarding is final). */
  readonly offboarded: boolean;
};

/**
 * Creates a tenant, its built-in roles and (optionally) its first admin. Idempotent: each step
 * is "create if absent", so running it again (BOOTSTRAP_* on every start, several gateways at
 * once, a retried ops command) changes nothing and repairs a half-done earlier run.
 */
export async function provisionTenant(pool: DatabasePool, input: ProvisionTenantInput): Promise<ProvisionTenantResult> {
  const { tenant, created } = await ensureTenant(pool, {
    slug: input.slug,
    name: input.name ?? input.slug,
    plan: input.plan,
    rateLimitOverride: input.rateLimitOverride ?? null,
  });
  const admin = input.admin;
  // An offboarding is final (offboardingLedger.ts): then nothing is provisioned.
  const done = await unlessOffboarded(pool, tenant.id, async (tx) => {
    await ensureBuiltInRoles(tx, tenant.id);
    if (!admin) return false;
    try {
      await createUser(tx, { tenantId: tenant.id, email: admin.email, password: admin.password, role: 'admin' });
      return true;
    } catch (error) {
      // There already (an earlier start), or bootstrapped by another process at the same instant.
      if (error instanceof ConflictError) return false;
      throw error;
    }
  });
  return { tenant, created, adminCreated: !done.offboarded && done.value, offboarded: done.offboarded };
}
