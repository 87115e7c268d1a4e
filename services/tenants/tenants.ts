import { z } from 'zod';
import { sql, type Queryable } from '../../shared/db/pool.ts';
import type { Plan, RateLimitOverride } from '../gateway/requestContext.ts';
import { EXAMPLE_TENANT_SLUG } from '../gateway/openapi.ts';

export const PLANS = ['starter', 'pro', 'enterprise'] as const satisfies readonly Plan[];

/** Lowercase letters, digits and inner hyphens; 1..63 characters (a DNS label). */
export const tenantSlugSchema = z
  .string()
  .max(63)
  .regex(/^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/, 'must be 1-63 lowercase letters, digits or inner hyphens');

/** The `X-Tenant` header every /v1 request carries, as a header schema. */
export const tenantHeaders = z.object({
  'x-tenant': tenantSlugSchema.describe('Tenant slug').meta({ examples: [EXAMPLE_TENANT_SLUG] }),
});

export const rateLimitOverrideSchema = z.object({
  perMinute: z.number().int().positive(),
  burst: z.number().int().positive(),
});

export type Tenant = {
  readonly id: string;
  readonly slug: string;
  readonly name: string;
  readonly plan: Plan;
  readonly rateLimitOverride: RateLimitOverride | null;
};

const tenantRow = z
  .object({
    id: z.string(),
    slug: z.string(),
    name: z.string(),
    plan: z.enum(PLANS),
    rate_per_minute: z.number().nullable(),
    rate_burst: z.number().nullable(),
  })
  .transform((row): Tenant => ({
    id: row.id,
    slug: row.slug,
    name: row.name,
    plan: row.plan,
    rateLimitOverride:
      row.rate_per_minute !== null && row.rate_burst !== null ? { perMinute: row.rate_per_minute, burst: row.rate_burst } : null,
  }));

const columns = sql.fragment`id, slug, name, plan, rate_per_minute, rate_burst`;

export async function findTenantBySlug(db: Queryable, slug: string): Promise<Tenant | null> {
  return db.maybeOne(sql.type(tenantRow)`select ${columns} from tenants where slug = ${slug}`);
}

export async function listTenants(db: Queryable): Promise<readonly Tenant[]> {
  return db.any(sql.type(tenantRow)`select ${columns} from tenants order by slug`);
}

/** Inserts the tenant unless its slug exists; returns the stored row and whether it was new. */
export async function ensureTenant(
  db: Queryable,
  input: { slug: string; name: string; plan: Plan; rateLimitOverride?: RateLimitOverride | null },
): Promise<{ tenant: Tenant; created: boolean }> {
  const slug = tenantSlugSchema.parse(input.slug);
  const override = input.rateLimitOverride ?? null;
  const inserted = await db.maybeOne(sql.type(tenantRow)`
    insert into tenants (slug, name, plan, rate_per_minute, rate_burst)
    values (${slug}, ${input.name}, ${input.plan}, ${override?.perMinute ?? null}, ${override?.burst ?? null})
    on conflict (slug) do nothing
    returning ${columns}
  `);
  if (inserted) return { tenant: inserted, created: true };
  const existing = await findTenantBySlug(db, slug);
  if (!existing) throw new Error(`tenant ${slug} vanished while being created`);
  return { tenant: existing, created: false };
}

/**
 * Changes plan and/or override. `rateLimitOverride: null` clears the override, `undefined`
 * leaves it. Running gateways see the change within the tenant cache's TTL.
 */
export async function updateTenantPlan(
  db: Queryable,
  slug: string,
  change: { plan?: Plan; rateLimitOverride?: RateLimitOverride | null },
): Promise<Tenant | null> {
  const override = change.rateLimitOverride;
  return db.maybeOne(sql.type(tenantRow)`
    update tenants set
      plan = coalesce(${change.plan ?? null}, plan),
      rate_per_minute = case when ${override === undefined} then rate_per_minute else ${override?.perMinute ?? null}::int end,
      rate_burst = case when ${override === undefined} then rate_burst else ${override?.burst ?? null}::int end,
      updated_at = now()
    where slug = ${slug}
    returning ${columns}
  `);
}
