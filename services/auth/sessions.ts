import { withTenant, type DatabasePool } from '../../shared/db/pool.ts';
import { TooManyRequestsError, UnauthorizedError } from '../../shared/errors.ts';
import type { TenantDirectory } from '../tenants/directory.ts';
import type { Tenant } from '../tenants/tenants.ts';
import type { LoginThrottle } from './loginThrottle.ts';
import { verifyPassword } from './passwords.ts';
import { issueRefreshToken, REFRESH_TOKEN_TTL_SECONDS, revokeRefreshTokenFamily, rotateRefreshToken } from './refreshTokens.ts';
import type { TokenService } from './tokens.ts';
import { findLoginCredentials } from './users.ts';

export type TokenPair = {
  readonly accessToken: string;
  readonly tokenType: 'Bearer';
  readonly expiresIn: number;
  readonly refreshToken: string;
  readonly refreshExpiresIn: number;
};

export type Sessions = {
  login(tenantSlug: string, email: string, password: string): Promise<TokenPair>;
  refresh(tenantSlug: string, refreshToken: string): Promise<TokenPair>;
  /** Revokes the token's family when it belongs to `userId` (the caller). */
  logout(tenantSlug: string, refreshToken: string, userId: string): Promise<void>;
};

export type SessionDeps = {
  readonly pool: DatabasePool;
  readonly tenants: TenantDirectory;
  readonly tokens: TokenService;
  readonly throttle: LoginThrottle;
  readonly now: () => number;
};

/** One answer for every failed login, whatever failed (RFC 6749 `invalid_grant` in spirit). */
const badCredentials = () => new UnauthorizedError('The e-mail, password or tenant is not correct');
const badRefreshToken = () => new UnauthorizedError('The refresh token is invalid, expired or revoked');

/** Login, refresh and logout: the use cases behind POST /v1/auth/*. */
export function createSessions(deps: SessionDeps): Sessions {
  const pair = async (tenant: Tenant, userId: string, role: string, refreshToken: string): Promise<TokenPair> => {
    const { accessToken, expiresIn } = await deps.tokens.issue({ userId, tenant: tenant.slug, roles: [role] });
    return { accessToken, tokenType: 'Bearer', expiresIn, refreshToken, refreshExpiresIn: REFRESH_TOKEN_TTL_SECONDS };
  };

  return {
    async login(tenantSlug, email, password) {
      const account = `${tenantSlug}\n${email.toLowerCase()}`;
      const retryAfter = await deps.throttle.retryAfterSeconds(account);
      if (retryAfter > 0) {
        throw new TooManyRequestsError(`Too many failed logins for this account; try again in ${retryAfter} s`, {}, { 'retry-after': String(retryAfter) });
      }
      // Every path below does one argon2 verification (a dummy one when there is no account),
      // so unknown tenant, unknown e-mail and wrong password take about the same time.
      const tenant = await deps.tenants.bySlug(tenantSlug);
      const credentials = tenant ? await withTenant(deps.pool, tenant.id, (tx) => findLoginCredentials(tx, email)) : null;
      const passwordOk = await verifyPassword(credentials?.passwordHash ?? null, password);
      if (!tenant || !credentials || !passwordOk || credentials.disabled) {
        await deps.throttle.recordFailure(account);
        throw badCredentials();
      }
      await deps.throttle.reset(account);
      const refreshToken = await withTenant(deps.pool, tenant.id, (tx) =>
        issueRefreshToken(tx, { tenantId: tenant.id, userId: credentials.id, now: deps.now() }),
      );
      return pair(tenant, credentials.id, credentials.role, refreshToken);
    },

    async refresh(tenantSlug, refreshToken) {
      const tenant = await deps.tenants.bySlug(tenantSlug);
      if (!tenant) throw badRefreshToken();
      const result = await withTenant(deps.pool, tenant.id, (tx) =>
        rotateRefreshToken(tx, { tenantId: tenant.id, refreshToken, now: deps.now() }),
      );
      switch (result.kind) {
        case 'rotated':
          return pair(tenant, result.userId, result.role, result.refreshToken);
        case 'reused':
          throw new UnauthorizedError('The refresh token was already used; its session has been revoked, log in again');
        case 'invalid':
          throw badRefreshToken();
        default: {
          const never: never = result;
          throw new Error(`unhandled rotation result ${JSON.stringify(never)}`);
        }
      }
    },

    async logout(tenantSlug, refreshToken, userId) {
      const tenant = await deps.tenants.bySlug(tenantSlug);
      if (!tenant) return;
      await withTenant(deps.pool, tenant.id, (tx) => revokeRefreshTokenFamily(tx, refreshToken, userId));
    },
  };
}
