import type { BucketPolicy } from './port.ts';

export type Plan = 'starter' | 'pro' | 'enterprise';

/** What a tenant's plan allows; `null` is unlimited. */
export const PLAN_LIMITS: { readonly [P in Plan]: BucketPolicy | null } = {
  starter: { perMinute: 60, burst: 10 },
  pro: { perMinute: 600, burst: 100 },
  enterprise: null,
};

export type TenantLimits = {
  readonly plan: Plan;
  readonly rateLimitOverride: { readonly perMinute: number; readonly burst: number } | null;
};

/**
 * The bucket a tenant gets, resolved on every request from what auth loaded, so a plan change
 * or a negotiated override applies without a restart. An override wins over any plan. Bucket
 * arithmetic needs positive integers; an override is rounded to one in [1, MAX_OVERRIDE],
 * never read as unlimited.
 */
export function resolvePolicy(tenant: TenantLimits): BucketPolicy | null {
  const override = tenant.rateLimitOverride;
  if (override) return { perMinute: positiveInteger(override.perMinute), burst: positiveInteger(override.burst) };
  return PLAN_LIMITS[tenant.plan];
}

/** Keeps burst × 60,000,000 units (bucket.ts) far below 2^53, where the arithmetic is exact. */
export const MAX_OVERRIDE = 10_000_000;

const positiveInteger = (n: number) => (Number.isNaN(n) ? 1 : Math.min(MAX_OVERRIDE, Math.max(1, Math.round(n))));
