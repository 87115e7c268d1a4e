import { UnauthorizedError } from '../../shared/errors.ts';

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

/**
 * The caller of a request in the authenticated scope. Throws (→ 401) when called from a route
 * outside it, which would be a wiring bug rather than a client error.
 */
export function requireAuth(request: { readonly auth?: AuthContext | undefined }): AuthContext {
  if (!request.auth) throw new UnauthorizedError('This endpoint requires an access token');
  return request.auth;
}
