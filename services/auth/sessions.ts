import { withTenant, type DatabasePool } from '../../shared/db/pool.ts';
import { normaliseEmail } from '../../shared/email.ts';
import { ServiceUnavailableError, TooManyRequestsError, UnauthorizedError } from '../../shared/errors.ts';
import { takeToken, type BucketState } from '../../shared/rate-limit/bucket.ts';
import { createMemoryRateLimitStore } from '../../shared/rate-limit/memory.ts';
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
  /**
   * Refreshes per client address, successful or not (a token bucket in this process; default
   * burst 30, 120 a minute): past it, 429 with Retry-After, before the shared bucket.
   */
  readonly refreshLimitPerAddress?: BucketPolicy;
  /** Refreshes one client address may have in flight at once (default 8): past it, 429 at once. */
  readonly maxRefreshesInFlightPerAddress?: number;
};

const UNKNOWN_CLIENT: Client = { ip: 'unknown' };
export const DEFAULT_GLOBAL_AUTH_LIMIT: BucketPolicy = { burst: 200, perMinute: 6_000 };
/**
 * A client refreshes once per access-token lifetime (15 minutes) per session, so 120 a minute
 * is about 1,800 sessions behind one address (a large office behind one NAT address), and a
 * burst of 30 covers many of them waking at once. One address then takes at most 2 of the
 * shared bucket's 100 tokens a second and 30 + 8 of its burst of 200: emptying it takes dozens
 * of addresses, not one.
 */
export const DEFAULT_REFRESH_LIMIT_PER_ADDRESS: BucketPolicy = { burst: 30, perMinute: 120 };
export const DEFAULT_MAX_REFRESHES_IN_FLIGHT_PER_ADDRESS = 8;

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
  const refreshesPerAddress = createMemoryRateLimitStore({ now: deps.now });
  const refreshLimit = deps.refreshLimitPerAddress ?? DEFAULT_REFRESH_LIMIT_PER_ADDRESS;
  const maxInFlight = deps.maxRefreshesInFlightPerAddress ?? DEFAULT_MAX_REFRESHES_IN_FLIGHT_PER_ADDRESS;
  const refreshesInFlight = new Map<string, number>();
  const refuse = (retryAfter: number, what: string) =>
    new TooManyRequestsError(`Too many failed ${what}; try again in ${retryAfter} s`, {}, { 'retry-after': String(retryAfter) });

  const refreshAdmitted = async (tenantSlug: string, refreshToken: string, client: Client): Promise<TokenPair> => {
    const perAddress = await refreshesPerAddress.consume(client.ip, refreshLimit);
    if (!perAddress.allowed) {
      const seconds = Math.max(1, Math.ceil(perAddress.waitMs / 1000));
      throw new TooManyRequestsError(
        `Too many refreshes from this address; try again in ${seconds} s`,
        {},
        { 'retry-after': String(seconds) },
      );
    }
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
  };

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
      // The per-address bounds come before the shared bucket, and count every refresh: the
      // failure counter alone lets through an address's successful refreshes without limit, and
      // a burst of concurrent junk that all read it before the first failure is written.
      const inFlight = refreshesInFlight.get(client.ip) ?? 0;
      if (inFlight >= maxInFlight) {
        throw new TooManyRequestsError('Too many refreshes at once from this address; retry in a moment', {}, { 'retry-after': '1' });
      }
      refreshesInFlight.set(client.ip, inFlight + 1);
      try {
        return await refreshAdmitted(tenantSlug, refreshToken, client);
      } finally {
        const left = (refreshesInFlight.get(client.ip) ?? 1) - 1;
        if (left > 0) refreshesInFlight.set(client.ip, left);
        else refreshesInFlight.delete(client.ip);
      }
    },

    async logout(tenantSlug, refreshToken, userId) {
      const tenant = await deps.tenants.bySlug(tenantSlug);
      if (!tenant) return;
      await withTenant(deps.pool, tenant.id, (tx) => revokeRefreshTokenFamily(tx, { tenantId: tenant.id, refreshToken, userId }));
    },
  };
}
