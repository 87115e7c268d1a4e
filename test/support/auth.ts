import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { Registry } from 'prom-client';
import { withTenant, type DatabasePool } from '../../shared/db/pool.ts';
import { createGateway, type V1Capability } from '../../services/gateway/app.ts';
import type { Plan, RateLimitOverride } from '../../services/gateway/requestContext.ts';
import { createKeyRing, generatePrivateJwk, type KeyRing } from '../../services/auth/keys.ts';
import type { LoginThrottleOptions } from '../../services/auth/loginThrottle.ts';
import type { VerificationGateOptions } from '../../services/auth/verificationGate.ts';
import type { BucketPolicy } from '../../shared/rate-limit/port.ts';
import type { RoleName } from '../../services/auth/permissions.ts';
import { authenticated, createAuthDeps, jwksRoutes, type AuthDeps, type CreateAuthDepsOptions } from '../../services/auth/plugin.ts';
import { authRoutes, rolesRoutes, sessionRoutes } from '../../services/auth/routes.ts';
import { createUser } from '../../services/auth/users.ts';
import { provisionTenant as provision } from '../../services/tenants/provision.ts';
import { testPersonalDataEnv } from './personalData.ts';

/**
 * Auth for API tests. Typical use:
 *
 *   const auth = await createTestAuth(db.pool);
 *   const app = await createTestApp(auth, employeesCapability(...));   // mounted behind auth
 *   const tenant = await provisionTenant(db.pool, { plan: 'pro' });
 *   const headers = await authHeaders(auth, tenant, 'hr_manager');     // {authorization, x-tenant}
 *   await app.inject({ method: 'GET', url: '/v1/employees', headers });
 */
export const TEST_ISSUER = 'test-issuer';
export const TEST_AUDIENCE = 'test-audience';

export type TestTenant = { readonly tenantId: string; readonly slug: string };

/**
 * Auth deps with a fresh in-memory key; the login throttle is in memory unless `redisUrl` is
 * given (then under a fresh key prefix). Close with `auth.close()`.
 */
export async function createTestAuth(
  pool: DatabasePool,
  options: {
    keys?: KeyRing;
    now?: () => number;
    redisUrl?: string;
    loginThrottle?: LoginThrottleOptions;
    loginGate?: VerificationGateOptions;
    globalAuthLimit?: BucketPolicy;
    refreshPerAddress?: CreateAuthDepsOptions['refreshPerAddress'];
    tenantCacheTtlMs?: number;
  } = {},
): Promise<AuthDeps> {
  return createAuthDeps({
    pool,
    config: {
      JWT_ISSUER: TEST_ISSUER,
      JWT_AUDIENCE: TEST_AUDIENCE,
      JWT_PRIVATE_JWKS: undefined,
      DATA_DIR: '.tmp/unused',
      EMAIL_HASH_KEY: testPersonalDataEnv.EMAIL_HASH_KEY,
    },
    keys: options.keys ?? (await createKeyRing([await generatePrivateJwk()])),
    redisUrl: options.redisUrl,
    loginThrottle: { keyPrefix: `test:login:${randomBytes(6).toString('hex')}`, ...options.loginThrottle },
    ...(options.loginGate && { loginGate: options.loginGate }),
    ...(options.globalAuthLimit && { globalAuthLimit: options.globalAuthLimit }),
    ...(options.refreshPerAddress && { refreshPerAddress: options.refreshPerAddress }),
    ...(options.tenantCacheTtlMs !== undefined ? { tenantCacheTtlMs: options.tenantCacheTtlMs } : {}),
    ...(options.now ? { now: options.now } : {}),
  });
}

/** The auth capabilities as the service mounts them: public auth routes, then the authenticated scope. */
export function authCapabilities(auth: AuthDeps, ...capabilities: readonly V1Capability[]): V1Capability[] {
  return [authRoutes(auth), authenticated(auth, sessionRoutes(auth), rolesRoutes(auth), ...capabilities)];
}

/** A gateway with auth, /v1/roles, the JWKS and `capabilities` mounted behind authentication. */
export async function createTestApp(auth: AuthDeps, ...capabilities: readonly V1Capability[]): Promise<FastifyInstance> {
  return createGateway({
    config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
    readiness: [],
    registry: new Registry(),
    v1: authCapabilities(auth, ...capabilities),
    publicRoutes: [jwksRoutes(auth)],
  });
}

/** A fresh tenant (random slug) with its built-in roles. */
export async function provisionTenant(
  pool: DatabasePool,
  options: { plan?: Plan; slug?: string; rateLimitOverride?: RateLimitOverride | null } = {},
): Promise<TestTenant> {
  const slug = options.slug ?? `t-${randomBytes(6).toString('hex')}`;
  const { tenant } = await provision(pool, { slug, plan: options.plan ?? 'pro', rateLimitOverride: options.rateLimitOverride ?? null });
  return { tenantId: tenant.id, slug: tenant.slug };
}

/** Signs an access token directly (no user row, no password hashing): the fast path for API tests. */
export async function issueToken(
  auth: AuthDeps,
  tenant: Pick<TestTenant, 'slug'>,
  role: RoleName | readonly string[],
  userId: string = crypto.randomUUID(),
): Promise<string> {
  const roles = typeof role === 'string' ? [role] : role;
  return (await auth.tokens.issue({ userId, tenant: tenant.slug, roles })).accessToken;
}

/** `Authorization` and `X-Tenant` headers for a caller with `role` in `tenant`. */
export async function authHeaders(
  auth: AuthDeps,
  tenant: Pick<TestTenant, 'slug'>,
  role: RoleName | readonly string[],
  userId?: string,
): Promise<{ authorization: string; 'x-tenant': string }> {
  return { authorization: `Bearer ${await issueToken(auth, tenant, role, userId)}`, 'x-tenant': tenant.slug };
}

/** Creates a user with `role` in the tenant and returns its credentials. */
export async function createTestUser(
  pool: DatabasePool,
  tenant: TestTenant,
  role: RoleName,
  options: { email?: string; password?: string } = {},
): Promise<{ userId: string; email: string; password: string }> {
  const email = options.email ?? `${role}-${randomBytes(4).toString('hex')}@example.test`;
  const password = options.password ?? `pw-${randomBytes(8).toString('hex')}`;
  const user = await withTenant(pool, tenant.tenantId, (tx) => createUser(tx, { tenantId: tenant.tenantId, email, password, role }));
  return { userId: user.id, email, password };
}

/** Logs in through the API as a new user with `role`: the real path, password hashing included. */
export async function loginAs(app: FastifyInstance, pool: DatabasePool, tenant: TestTenant, role: RoleName) {
  const user = await createTestUser(pool, tenant, role);
  const response = await app.inject({
    method: 'POST',
    url: '/v1/auth/login',
    headers: { 'x-tenant': tenant.slug },
    payload: { email: user.email, password: user.password },
  });
  if (response.statusCode !== 200) throw new Error(`login as ${role} failed: ${response.statusCode} ${response.body}`);
  const body = response.json<{ accessToken: string; refreshToken: string }>();
  return {
    ...user,
    accessToken: body.accessToken,
    refreshToken: body.refreshToken,
    headers: { authorization: `Bearer ${body.accessToken}`, 'x-tenant': tenant.slug },
  };
}
