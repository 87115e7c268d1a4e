import { UniqueIntegrityConstraintViolationError } from 'slonik';
import type { DatabasePool } from '../../shared/db/pool.ts';
import type { Plan, RateLimitOverride } from '../gateway/requestContext.ts';
import { ensureBuiltInRoles } from '../auth/roles.ts';
import { createUser, findUserByEmail } from '../auth/users.ts';
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
  const ensureRolesAndAdmin = () =>
    unlessOffboarded(pool, tenant.id, async (tx) => {
      await ensureBuiltInRoles(tx, tenant.id);
      if (!admin) return false;
      const existing = await findUserByEmail(tx, tenant.id, admin.email);
      if (existing?.hasPassword) return false;
      await createUser(tx, { tenantId: tenant.id, email: admin.email, password: admin.password, role: 'admin' });
      return true;
    });
  let done: Awaited<ReturnType<typeof ensureRolesAndAdmin>>;
  try {
    done = await ensureRolesAndAdmin();
  } catch (error) {
    // Another process bootstrapped the same admin at the same instant: it exists now.
    if (!(error instanceof UniqueIntegrityConstraintViolationError)) throw error;
    done = await ensureRolesAndAdmin();
  }
  return { tenant, created, adminCreated: !done.offboarded && done.value, offboarded: done.offboarded };
}
