/**
 * What an authenticated request knows about its caller. Set by the auth plugin (services/auth)
 * before any capability handler runs; read it with `requireAuth(request)`.
 */
export type Plan = 'starter' | 'pro' | 'enterprise';

export type RateLimitOverride = { readonly perMinute: number; readonly burst: number };

export type AuthContext = {
  /** Tenant uuid: the key of every tenant-scoped row and stream. */
  readonly tenantId: string;
  readonly tenantSlug: string;
  readonly plan: Plan;
  readonly rateLimitOverride: RateLimitOverride | null;
  readonly userId: string;
  readonly roles: readonly string[];
};

declare module 'fastify' {
  interface FastifyRequest {
    auth?: AuthContext;
  }
}
