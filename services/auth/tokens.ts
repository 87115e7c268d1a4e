import { randomUUID } from 'node:crypto';
import { errors, jwtVerify, SignJWT, type JWTHeaderParameters } from 'jose';
import { LRUCache } from 'lru-cache';
import { z } from 'zod';
import { cacheSize } from '../../shared/cacheSize.ts';
import { JWT_ALGORITHM, type KeyRing } from './keys.ts';

export const ACCESS_TOKEN_TTL_SECONDS = 900;
export const ACCESS_TOKEN_TYPE = 'at+jwt';

/** The OpenAPI document's words for the bearer scheme; the composition root hands them to the gateway. */
export const BEARER_SCHEME_DESCRIPTION = `An access token from \`POST /v1/auth/login\` or \`/v1/auth/refresh\`: a JWS signed with EdDSA (Ed25519), valid ${ACCESS_TOKEN_TTL_SECONDS / 60} minutes (\`expiresIn\`), then refreshed with the single-use refresh token. The public keys are at \`GET /.well-known/jwks.json\` (by \`kid\`). Verification follows RFC8725: the algorithm, issuer, audience and \`typ: at+jwt\` are pinned, \`alg: none\` and HMAC are refused.`;
/** Leeway for clocks of several gateways that are slightly apart. */
const CLOCK_TOLERANCE_SECONDS = 5;

export type AccessTokenSubject = { readonly userId: string; readonly tenant: string; readonly roles: readonly string[] };
export type VerifiedAccessToken = AccessTokenSubject & { readonly jti: string; readonly expiresAt: number };

/** Why a token was refused; becomes the `error_description` of `WWW-Authenticate`. */
export class InvalidAccessTokenError extends Error {
  readonly reason: 'expired' | 'invalid';
  constructor(reason: 'expired' | 'invalid') {
    super(reason === 'expired' ? 'The access token expired' : 'The access token is invalid');
    this.reason = reason;
  }
}

const claimsSchema = z.object({
  sub: z.string().min(1),
  tenant: z.string().min(1),
  roles: z.array(z.string()),
  jti: z.string().min(1),
  exp: z.number(),
  iat: z.number(),
});

export type TokenService = {
  issue(subject: AccessTokenSubject): Promise<{ accessToken: string; expiresIn: number }>;
  verify(token: string): Promise<VerifiedAccessToken>;
};

export type TokenServiceOptions = {
  readonly keys: KeyRing;
  readonly issuer: string;
  readonly audience: string;
  /** Milliseconds since the epoch; injected by tests. */
  readonly now?: () => number;
  /** How many verified tokens to remember (each is verified once, then looked up); default 10,000. */
  readonly cacheSize?: number;
};

/**
 * Issues and verifies access tokens (RFC 9068 shape). Verification pins the algorithm, issuer,
 * audience and `typ` (RFC 8725): `alg: none`, HS256 keyed with the public key and tokens of
 * another issuer or audience all fail here. A token that verified once is remembered by its
 * exact text until it expires, so the signature is checked once per token, not per request.
 */
export function createTokenService(options: TokenServiceOptions): TokenService {
  const now = options.now ?? Date.now;
  // Least recently used out: a Map evicting its oldest key walks the tombstones that earlier
  // evictions left at its front, while lru-cache evicts in constant time.
  const verified = new LRUCache<string, VerifiedAccessToken>({ max: cacheSize(options.cacheSize, 10_000) });

  const getKey = (header: JWTHeaderParameters) => {
    const key = header.kid === undefined ? undefined : options.keys.verificationKey(header.kid);
    if (!key) throw new errors.JWKSNoMatchingKey();
    return key;
  };

  return {
    async issue(subject) {
      const iat = Math.floor(now() / 1000);
      const accessToken = await new SignJWT({ tenant: subject.tenant, roles: [...subject.roles] })
        .setProtectedHeader({ alg: JWT_ALGORITHM, kid: options.keys.signing.kid, typ: ACCESS_TOKEN_TYPE })
        .setIssuer(options.issuer)
        .setAudience(options.audience)
        .setSubject(subject.userId)
        .setIssuedAt(iat)
        .setExpirationTime(iat + ACCESS_TOKEN_TTL_SECONDS)
        .setJti(randomUUID())
        .sign(options.keys.signing.key);
      return { accessToken, expiresIn: ACCESS_TOKEN_TTL_SECONDS };
    },

    async verify(token) {
      const nowSeconds = now() / 1000;
      const cached = verified.get(token);
      if (cached) {
        if (cached.expiresAt + CLOCK_TOLERANCE_SECONDS > nowSeconds) return cached;
        verified.delete(token);
        throw new InvalidAccessTokenError('expired');
      }
      let payload: unknown;
      try {
        ({ payload } = await jwtVerify(token, getKey, {
          algorithms: [JWT_ALGORITHM],
          issuer: options.issuer,
          audience: options.audience,
          typ: ACCESS_TOKEN_TYPE,
          requiredClaims: ['sub', 'iat', 'exp', 'jti'],
          clockTolerance: CLOCK_TOLERANCE_SECONDS,
          currentDate: new Date(now()),
        }));
      } catch (error) {
        throw new InvalidAccessTokenError(error instanceof errors.JWTExpired ? 'expired' : 'invalid');
      }
      const claims = claimsSchema.safeParse(payload);
      if (!claims.success) throw new InvalidAccessTokenError('invalid');
      const result: VerifiedAccessToken = {
        userId: claims.data.sub,
        tenant: claims.data.tenant,
        roles: claims.data.roles,
        jti: claims.data.jti,
        expiresAt: claims.data.exp,
      };
      verified.set(token, result);
      return result;
    },
  };
}
