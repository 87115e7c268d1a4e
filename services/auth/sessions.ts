import { withTenant, type DatabasePool } from '../../shared/db/pool.ts';
import { normaliseEmail } from '../../shared/email.ts';
import { ServiceUnavailableError, TooManyRequestsError, UnauthorizedError } from '../../shared/errors.ts';
import { takeToken, type BucketState } from '../../shared/rate-limit/bucket.ts';
import type { BucketPolicy } from '../../shared/rate-limit/port.ts';
import type { TenantDirectory } from '../tenants/directory.ts';
import type { Tenant } from '../tenants/tenants.ts';
import type { LoginThrottle } from './loginThrottle.ts';
import { createVerificationGate, type VerificationGate } from './verificationGate.ts';
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

/** Who is asking: the bounds on login and refresh are per client address. */
export type Client = { readonly ip: string };

export type Sessions = {
  login(tenantSlug: string, email: string, password: string, client?: Client): Promise<TokenPair>;
  refresh(tenantSlug: string, refreshToken: string, client?: Client): Promise<TokenPair>;
  /** Revokes the token's family when it belongs to `userId` (the caller). */
  logout(tenantSlug: string, refreshToken: string, userId: string): Promise<void>;
};

export type SessionDeps = {
  readonly pool: DatabasePool;
  readonly tenants: TenantDirectory;
  readonly tokens: TokenService;
  readonly throttle: LoginThrottle;
  readonly now: () => number;
  /** Caps concurrent password verifications, fairly per client address (default: one per core). */
  readonly gate?: VerificationGate;
  /**
   * All logins and refreshes of this process together (a token bucket; default burst 200,
   * 6,000 a minute): past it, 503 with Retry-After before the lookups and the hashing. Only
   * requests that the per-address bounds have let through take a token.
   */
  readonly globalLimit?: BucketPolicy;
};

const UNKNOWN_CLIENT: Client = { ip: 'unknown' };
export const DEFAULT_GLOBAL_AUTH_LIMIT: BucketPolicy = { burst: 200, perMinute: 6_000 };

/** One answer for every failed login, whatever failed (RFC 6749 `invalid_grant` in spirit). */
const badCredentials = () => new UnauthorizedError('The e-mail, password or tenant is not correct');
const badRefreshToken = () => new UnauthorizedError('The refresh token is invalid, expired or revoked');

/** Login, refresh and logout: the use cases behind POST /v1/auth/*. */
export function createSessions(deps: SessionDeps): Sessions {
  const pair = async (tenant: Tenant, userId: string, role: string, refreshToken: string): Promise<TokenPair> => {
    const { accessToken, expiresIn } = await deps.tokens.issue({ userId, tenant: tenant.slug, roles: [role] });
    return { accessToken, tokenType: 'Bearer', expiresIn, refreshToken, refreshExpiresIn: REFRESH_TOKEN_TTL_SECONDS };
  };

  const gate = deps.gate ?? createVerificationGate();
  const globalLimit = deps.globalLimit ?? DEFAULT_GLOBAL_AUTH_LIMIT;
  let globalBucket: BucketState | undefined;
  /**
   * The process-wide bound on login + refresh, taken only after the per-address bounds have
   * admitted the request: a token taken before them would let one address that they refuse
   * (cheaply) drain the bucket, and every tenant's logins would then get 503.
   */
  const admitGlobally = () => {
    const { state, decision } = takeToken(globalBucket, globalLimit, deps.now() * 1000);
    globalBucket = state;
    if (!decision.allowed) {
      const seconds = String(Math.max(1, Math.ceil(decision.waitMs / 1000)));
      throw new ServiceUnavailableError('Too many logins and refreshes at once; retry shortly', {}, { 'retry-after': seconds });
    }
  };
  const refuse = (retryAfter: number, what: string) =>
    new TooManyRequestsError(`Too many failed ${what}; try again in ${retryAfter} s`, {}, { 'retry-after': String(retryAfter) });

  return {
    async login(tenantSlug, email, password, client = UNKNOWN_CLIENT) {
      // The one normalisation (shared/email.ts): the same key the account lookup uses.
      const attempt = { account: `${tenantSlug}\n${normaliseEmail(email)}`, ip: client.ip };
      const retryAfter = await deps.throttle.retryAfterSeconds(attempt);
      if (retryAfter > 0) throw refuse(retryAfter, 'logins for this account from this address');
      // Every path below does one argon2 verification (a dummy one when there is no account),
      // so unknown tenant, unknown e-mail and wrong password take about the same time.
      // At most one verification per core at a time, shared fairly between client addresses; the
      // lookups run inside the gate too, so requests it refuses cost no database work either. The
      // shared bucket is asked last, once the address's own turn has come.
      const { tenant, credentials, passwordOk } = await gate.run(client.ip, async () => {
        admitGlobally();
        const tenant = await deps.tenants.bySlug(tenantSlug);
        const credentials = tenant ? await withTenant(deps.pool, tenant.id, (tx) => findLoginCredentials(tx, tenant.id, email)) : null;
        return { tenant, credentials, passwordOk: await verifyPassword(credentials?.passwordHash ?? null, password) };
      });
      if (!tenant || !credentials || !passwordOk || credentials.disabled) {
        await deps.throttle.recordFailure(attempt);
        throw badCredentials();
      }
      await deps.throttle.reset(attempt);
      const refreshToken = await withTenant(deps.pool, tenant.id, (tx) =>
        issueRefreshToken(tx, { tenantId: tenant.id, userId: credentials.id, now: deps.now() }),
      );
      return pair(tenant, credentials.id, credentials.role, refreshToken);
    },

    async refresh(tenantSlug, refreshToken, client = UNKNOWN_CLIENT) {
      const retryAfter = await deps.throttle.ipRetryAfterSeconds(client.ip);
      if (retryAfter > 0) throw refuse(retryAfter, 'logins or refreshes from this address');
      admitGlobally();
      const tenant = await deps.tenants.bySlug(tenantSlug);
      if (!tenant) {
        await deps.throttle.recordIpFailure(client.ip);
        throw badRefreshToken();
      }
      const result = await withTenant(deps.pool, tenant.id, (tx) =>
        rotateRefreshToken(tx, { tenantId: tenant.id, refreshToken, now: deps.now() }),
      );
      if (result.kind !== 'rotated') await deps.throttle.recordIpFailure(client.ip);
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
      await withTenant(deps.pool, tenant.id, (tx) => revokeRefreshTokenFamily(tx, { tenantId: tenant.id, refreshToken, userId }));
    },
  };
}
