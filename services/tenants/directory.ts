import type { DatabasePool } from '../../shared/db/pool.ts';
import { findTenantBySlug, type Tenant } from './tenants.ts';

/**
 * Tenant lookups for the request path: one database read per slug per TTL, shared by
 * concurrent requests. The TTL bounds how long a plan change (ops `tenants set-plan`) takes to
 * reach the rate limiter, which reads the plan from `request.auth`.
 */
export type TenantDirectory = {
  bySlug(slug: string): Promise<Tenant | null>;
  /** Forget a slug now (this process only; other processes wait out the TTL). */
  invalidate(slug: string): void;
};

export const TENANT_CACHE_TTL_MS = 2_000;
const MAX_ENTRIES = 10_000;

export function createTenantDirectory(pool: DatabasePool, options: { ttlMs?: number; now?: () => number } = {}): TenantDirectory {
  const ttlMs = options.ttlMs ?? TENANT_CACHE_TTL_MS;
  const now = options.now ?? Date.now;
  const entries = new Map<string, { expiresAt: number; value: Promise<Tenant | null> }>();

  return {
    bySlug(slug) {
      const hit = entries.get(slug);
      if (hit && hit.expiresAt > now()) return hit.value;
      // Unknown slugs are cached too (so junk cannot hammer the database); the cap keeps a
      // flood of distinct junk slugs from growing memory without bound.
      if (entries.size >= MAX_ENTRIES) entries.clear();
      const value = findTenantBySlug(pool, slug);
      entries.set(slug, { expiresAt: now() + ttlMs, value });
      value.catch(() => {
        if (entries.get(slug)?.value === value) entries.delete(slug);
      });
      return value;
    },
    invalidate(slug) {
      entries.delete(slug);
    },
  };
}
