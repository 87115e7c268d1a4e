import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../../shared/config.ts';
import type { DatabasePool } from '../../shared/db/pool.ts';
import { loadEmailHashKey } from '../../shared/personal-data/emailHash.ts';
import { BadRequestError, ForbiddenError, UnauthorizedError } from '../../shared/errors.ts';
import type { V1Capability } from '../gateway/app.ts';
import { problemSchema } from '../gateway/problems.ts';
import { createTenantDirectory, type TenantDirectory } from '../tenants/directory.ts';
import { tenantSlugSchema } from '../tenants/tenants.ts';
import { loadKeyRing, type KeyRing } from './keys.ts';
import { connectLoginThrottleRedis, createLoginThrottle, type LoginThrottle, type LoginThrottleOptions } from './loginThrottle.ts';
import { warmUpPasswordHashing } from './passwords.ts';
import { isPermission, rolesAllow, type Permission } from './permissions.ts';
import { createSessions, type Sessions } from './sessions.ts';
import { createTokenService, InvalidAccessTokenError, type TokenService } from './tokens.ts';
import { createVerificationGate, type VerificationGate, type VerificationGateOptions } from './verificationGate.ts';
import type { BucketPolicy } from '../../shared/rate-limit/port.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * The permission a route of the authenticated scope requires (services/auth/permissions.ts).
     * Required: the scope refuses to register a route without one.
     */
    permission?: Permission;
  }
}

/** Everything the auth capability needs, built once per process. */
export type AuthDeps = {
  readonly pool: DatabasePool;
  readonly keys: KeyRing;
  readonly tokens: TokenService;
  readonly tenants: TenantDirectory;
  readonly throttle: LoginThrottle;
  /** The cap on concurrent password verifications (per process, fair per client address). */
  readonly gate: VerificationGate;
  readonly sessions: Sessions;
  /** Routes of the authenticated scopes and the permission each requires (the RBAC matrix test reads it). */
  readonly routes: Array<{ readonly method: string; readonly url: string; readonly permission: Permission }>;
  /** Releases what the deps own (the throttle's Redis connection). */
  close(): Promise<void>;
};

export type CreateAuthDepsOptions = {
  readonly pool: DatabasePool;
  readonly config: Pick<Config, 'JWT_ISSUER' | 'JWT_AUDIENCE' | 'JWT_PRIVATE_JWKS' | 'DATA_DIR' | 'EMAIL_HASH_KEY'>;
  /** Where login-failure counters are shared (REDIS_URL); in-process without it. */
  readonly redisUrl?: string | undefined;
  readonly loginThrottle?: LoginThrottleOptions;
  readonly loginGate?: VerificationGateOptions;
  /** Logins + refreshes per process (token bucket); default sessions.ts DEFAULT_GLOBAL_AUTH_LIMIT. */
  readonly globalAuthLimit?: BucketPolicy;
  /** Refreshes per client address (token bucket) and in flight per address; defaults in sessions.ts. */
  readonly refreshPerAddress?: { readonly limit?: BucketPolicy; readonly maxInFlight?: number };
  readonly keys?: KeyRing;
  readonly tenantCacheTtlMs?: number;
  readonly now?: () => number;
};

export async function createAuthDeps(options: CreateAuthDepsOptions): Promise<AuthDeps> {
  const now = options.now ?? Date.now;
  const keys = options.keys ?? (await loadKeyRing(options.config));
  const tokens = createTokenService({ keys, issuer: options.config.JWT_ISSUER, audience: options.config.JWT_AUDIENCE, now });
  const tenants = createTenantDirectory(options.pool, { ttlMs: options.tenantCacheTtlMs, now });
  const redis = options.redisUrl ? await connectLoginThrottleRedis(options.redisUrl) : undefined;
  const throttle = createLoginThrottle(redis, await loadEmailHashKey(options.config), options.loginThrottle);
  await warmUpPasswordHashing();
  const gate = createVerificationGate(options.loginGate);
  const sessions = createSessions({
    pool: options.pool,
    tenants,
    tokens,
    throttle,
    now,
    gate,
    ...(options.globalAuthLimit && { globalLimit: options.globalAuthLimit }),
    ...(options.refreshPerAddress?.limit && { refreshLimitPerAddress: options.refreshPerAddress.limit }),
    ...(options.refreshPerAddress?.maxInFlight !== undefined && { maxRefreshesInFlightPerAddress: options.refreshPerAddress.maxInFlight }),
  });
  return {
    pool: options.pool,
    keys,
    tokens,
    tenants,
    throttle,
    gate,
    sessions,
    routes: [],
    async close() {
      redis?.disconnect();
    },
  };
}

const REALM = 'employee-analytics';

const challenge = (error?: { code: 'invalid_token' | 'insufficient_scope'; description: string }) =>
  error ? `Bearer realm="${REALM}", error="${error.code}", error_description="${error.description}"` : `Bearer realm="${REALM}"`;

const unauthorized = (detail: string, error?: { code: 'invalid_token'; description: string }) =>
  new UnauthorizedError(detail, {}, { 'www-authenticate': challenge(error) });

// RFC 6750 b64token.
const BEARER = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i;

/** The `X-Tenant` header as a slug; 400 when it is missing or not a slug. */
export function tenantHeader(request: FastifyRequest): string {
  const value = request.headers['x-tenant'];
  if (value === undefined || value === '') {
    throw new BadRequestError('The X-Tenant header is required: it names the tenant (its slug)', {
      errors: [{ path: 'headers.x-tenant', message: 'is required' }],
    });
  }
  const slug = tenantSlugSchema.safeParse(value);
  if (!slug.success) {
    throw new BadRequestError('The X-Tenant header must be one tenant slug (lowercase letters, digits, hyphens)', {
      errors: [{ path: 'headers.x-tenant', message: 'must be 1-63 lowercase letters, digits or inner hyphens' }],
    });
  }
  return slug.data;
}

/**
 * The authentication hook: bearer token → verified claims (signature checked once per token,
 * then cached) → tenant (cached lookup, ≤ TTL old) → `request.auth` → the route's permission.
 * Runs at onRequest, before the body is even read.
 */
function createAuthHook(deps: AuthDeps) {
  return async function authenticate(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const header = request.headers.authorization;
    if (header === undefined || header === '') throw unauthorized('This endpoint requires an access token (Authorization: Bearer <token>)');
    const match = BEARER.exec(header);
    const token = match?.[1];
    if (token === undefined) {
      throw unauthorized('The Authorization header must be "Bearer <access token>"', {
        code: 'invalid_token',
        description: 'Malformed Authorization header',
      });
    }
    let claims;
    try {
      claims = await deps.tokens.verify(token);
    } catch (error) {
      if (!(error instanceof InvalidAccessTokenError)) throw error;
      throw unauthorized(error.message, { code: 'invalid_token', description: error.message });
    }
    const slug = tenantHeader(request);
    if (slug !== claims.tenant) throw new ForbiddenError('The access token was issued for another tenant than X-Tenant names');
    const tenant = await deps.tenants.bySlug(slug);
    if (!tenant)
      throw unauthorized('The tenant of this access token no longer exists', { code: 'invalid_token', description: 'Unknown tenant' });
    request.auth = {
      tenantId: tenant.id,
      tenantSlug: tenant.slug,
      plan: tenant.plan,
      rateLimitOverride: tenant.rateLimitOverride,
      userId: claims.userId,
      roles: claims.roles,
    };
    // Every later log line of this request (the completion line included) names its caller.
    request.log = request.log.child({ tenant: tenant.slug, userId: claims.userId });
    reply.log = request.log;
    const permission = request.routeOptions.config.permission;
    if (permission === undefined || !rolesAllow(claims.roles, permission)) {
      reply.header(
        'www-authenticate',
        challenge({ code: 'insufficient_scope', description: `Requires ${permission ?? 'a declared permission'}` }),
      );
      throw new ForbiddenError(`Your role does not grant ${permission ?? 'this operation'}`);
    }
  };
}

/**
 * Mounts `capabilities` in an encapsulated child of /v1 where every route requires a valid
 * access token, a matching X-Tenant and the permission named in its `config.permission`.
 * Capabilities are called with the child instance, so hooks they add (rate limiting, usage
 * metrics) run after authentication and see `request.auth`.
 */
export function authenticated(deps: AuthDeps, ...capabilities: readonly V1Capability[]): V1Capability {
  return async (v1) => {
    await v1.register(async (scope: FastifyInstance) => {
      scope.addHook('onRoute', (route) => {
        const permission: unknown = route.config?.permission;
        if (!isPermission(permission)) {
          throw new Error(
            `Route ${String(route.method)} ${route.url} is in the authenticated scope but declares no valid config.permission`,
          );
        }
        for (const method of [route.method].flat()) deps.routes.push({ method, url: route.url, permission });
        // The scope's own answers (bad X-Tenant, no token, other tenant or role) are documented on
        // every route of it, including routes added later. X-Tenant itself is the `tenant`
        // security scheme of the document (services/gateway/openapi.ts), checked by the hook below.
        route.schema = { ...route.schema, response: withScopeProblems(route.schema?.response) };
      });
      scope.addHook('onRequest', createAuthHook(deps));
      for (const capability of capabilities) await capability(scope);
    });
  };
}

/** What the scope itself may answer on any route: bad X-Tenant (400), no token (401), other tenant or role (403). */
function withScopeProblems(response: unknown): unknown {
  if (response === undefined || typeof response !== 'object' || response === null) return response;
  return { 400: problemSchema, 401: problemSchema, 403: problemSchema, ...response };
}

/** GET /.well-known/jwks.json: the public keys, for gateways or clients that verify tokens. */
export function jwksRoutes(deps: Pick<AuthDeps, 'keys'>): FastifyPluginAsync {
  return async (app) => {
    app.get('/.well-known/jwks.json', { schema: { hide: true } }, async (_request, reply) => {
      reply.header('cache-control', 'public, max-age=300');
      return deps.keys.jwks;
    });
  };
}
