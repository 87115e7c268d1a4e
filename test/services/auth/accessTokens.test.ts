import { createPublicKey } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { base64url, decodeJwt, decodeProtectedHeader, SignJWT, UnsecuredJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createKeyRing, generatePrivateJwk, type KeyRing, type PrivateJwk } from '../../../services/auth/keys.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { ACCESS_TOKEN_TTL_SECONDS, createTokenService } from '../../../services/auth/tokens.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import {
  authHeaders,
  createTestApp,
  createTestAuth,
  issueToken,
  provisionTenant,
  TEST_AUDIENCE,
  TEST_ISSUER,
  type TestTenant,
} from '../../support/auth.ts';

let db: TestDatabase;
let app: FastifyInstance;
let auth: AuthDeps;
let jwk: PrivateJwk;
let keys: KeyRing;
let tenant: TestTenant;
let otherTenant: TestTenant;

beforeAll(async () => {
  db = await createTestDatabase();
  jwk = await generatePrivateJwk();
  keys = await createKeyRing([jwk]);
  auth = await createTestAuth(db.pool, { keys });
  app = await createTestApp(auth);
  [tenant, otherTenant] = await Promise.all([provisionTenant(db.pool), provisionTenant(db.pool)]);
});
afterAll(async () => {
  await app?.close();
  await auth?.close();
  await db?.drop();
});

const getRoles = (headers: Record<string, string>) => app.inject({ method: 'GET', url: '/v1/roles', headers });

/** Claims that would be valid, on any jose builder (signed or unsecured). */
function validClaims<T extends SignJWT | UnsecuredJWT>(builder: T, options: { issuer?: string; audience?: string } = {}): T {
  const now = Math.floor(Date.now() / 1000);
  builder
    .setIssuer(options.issuer ?? TEST_ISSUER)
    .setAudience(options.audience ?? TEST_AUDIENCE)
    .setSubject(crypto.randomUUID())
    .setIssuedAt(now)
    .setExpirationTime(now + 900)
    .setJti(crypto.randomUUID());
  return builder;
}

/** A token signed by our key with any header and claims (to build near-valid forgeries). */
async function craft(
  options: { header?: Record<string, unknown>; claims?: Record<string, unknown>; issuer?: string; audience?: string } = {},
) {
  const builder = new SignJWT({ tenant: tenant.slug, roles: ['admin'], ...options.claims }).setProtectedHeader({
    alg: 'EdDSA',
    kid: jwk.kid,
    typ: 'at+jwt',
    ...options.header,
  });
  return validClaims(builder, options).sign(keys.signing.key);
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}`, 'x-tenant': tenant.slug });

function expectInvalidToken(response: Awaited<ReturnType<typeof getRoles>>) {
  expect(response.statusCode).toBe(401);
  expect(response.headers['content-type']).toContain('application/problem+json');
  expect(response.headers['www-authenticate']).toMatch(/^Bearer realm="[^"]+", error="invalid_token"/);
}

describe('when a valid token is presented', () => {
  it('is accepted, and has the documented header and claims', async () => {
    const token = await issueToken(auth, tenant, 'analyst');
    expect((await getRoles(bearer(token))).statusCode).toBe(200);
    expect(decodeProtectedHeader(token)).toEqual({ alg: 'EdDSA', kid: jwk.kid, typ: 'at+jwt' });
    const claims = decodeJwt(token);
    expect(claims).toMatchObject({ iss: TEST_ISSUER, aud: TEST_AUDIENCE, tenant: tenant.slug, roles: ['analyst'] });
    expect(claims.exp).toBe((claims.iat ?? 0) + ACCESS_TOKEN_TTL_SECONDS);
    expect(claims.jti).toMatch(/^[0-9a-f-]{36}$/);
    expect(typeof claims.sub).toBe('string');
  });
});

describe('when the request is refused', () => {
  it('without a token: 401 with a bare Bearer challenge', async () => {
    const response = await getRoles({ 'x-tenant': tenant.slug });
    expect(response.statusCode).toBe(401);
    expect(response.headers['www-authenticate']).toBe('Bearer realm="employee-analytics"');
    expect(response.json()).toMatchObject({ type: '/problems/unauthorized', status: 401, instance: '/v1/roles' });
  });

  it.each([
    ['Basic scheme', 'Basic dXNlcjpwYXNz'],
    ['scheme only', 'Bearer'],
    ['two tokens', 'Bearer abc def'],
    ['not a b64token', 'Bearer abc{}'],
    ['not a JWT', 'Bearer abc.def'],
  ])('with a malformed Authorization header (%s): 401 invalid_token', async (_case, header) => {
    expectInvalidToken(await getRoles({ authorization: header, 'x-tenant': tenant.slug }));
  });

  it('with an expired token: 401 invalid_token saying it expired', async () => {
    const past = createTokenService({ keys, issuer: TEST_ISSUER, audience: TEST_AUDIENCE, now: () => Date.now() - 16 * 60_000 });
    const { accessToken } = await past.issue({ userId: crypto.randomUUID(), tenant: tenant.slug, roles: ['admin'] });
    const response = await getRoles(bearer(accessToken));
    expectInvalidToken(response);
    expect(response.headers['www-authenticate']).toContain('expired');
  });

  it('with alg: none: 401', async () => {
    const token = validClaims(new UnsecuredJWT({ tenant: tenant.slug, roles: ['admin'] })).encode();
    expect(decodeProtectedHeader(token).alg).toBe('none');
    expectInvalidToken(await getRoles(bearer(token)));
  });

  it('with HS256 keyed with the public key (algorithm confusion): 401', async () => {
    const publicJwk = { kty: 'OKP', crv: 'Ed25519', x: jwk.x };
    const pem = createPublicKey({ key: publicJwk, format: 'jwk' }).export({ type: 'spki', format: 'pem' });
    const jwks = JSON.stringify((await app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).json());
    const secrets = [new TextEncoder().encode(String(pem)), base64url.decode(jwk.x), new TextEncoder().encode(jwks)];
    for (const secret of secrets) {
      const builder = new SignJWT({ tenant: tenant.slug, roles: ['admin'] }).setProtectedHeader({
        alg: 'HS256',
        kid: jwk.kid,
        typ: 'at+jwt',
      });
      const token = await validClaims(builder).sign(secret);
      expectInvalidToken(await getRoles(bearer(token)));
    }
  });

  it('with a wrong audience: 401', async () => {
    expectInvalidToken(await getRoles(bearer(await craft({ audience: 'some-other-api' }))));
  });

  it('with a wrong issuer: 401', async () => {
    expectInvalidToken(await getRoles(bearer(await craft({ issuer: 'https://evil.example' }))));
  });

  it('with a wrong typ (e.g. an ID token or plain JWT): 401', async () => {
    expectInvalidToken(await getRoles(bearer(await craft({ header: { typ: 'JWT' } }))));
  });

  it('with an unknown kid or a key of someone else: 401', async () => {
    expectInvalidToken(await getRoles(bearer(await craft({ header: { kid: 'unknown' } }))));
    const stranger = await createTestAuth(db.pool);
    expectInvalidToken(await getRoles(bearer(await issueToken(stranger, tenant, 'admin'))));
    await stranger.close();
  });

  it('with a tampered payload (role raised, signature kept): 401', async () => {
    const token = await issueToken(auth, tenant, 'employee');
    const [header, payload, signature] = token.split('.');
    const claims = JSON.parse(new TextDecoder().decode(base64url.decode(payload ?? '')));
    const forged = base64url.encode(JSON.stringify({ ...claims, roles: ['admin'] }));
    expectInvalidToken(await getRoles(bearer(`${header}.${forged}.${signature}`)));
  });

  it('with claims of the wrong shape (roles not a list): 401', async () => {
    expectInvalidToken(await getRoles(bearer(await craft({ claims: { roles: 'admin' } }))));
  });

  it("with another tenant's token (X-Tenant names a different tenant): 403", async () => {
    const headers = { ...(await authHeaders(auth, otherTenant, 'admin')), 'x-tenant': tenant.slug };
    const response = await getRoles(headers);
    expect(response.statusCode).toBe(403);
    expect(response.json()).toMatchObject({ type: '/problems/forbidden', status: 403 });
  });

  it('without X-Tenant: 400', async () => {
    const { authorization } = await authHeaders(auth, tenant, 'admin');
    expect((await getRoles({ authorization })).statusCode).toBe(400);
    expect((await getRoles({ authorization, 'x-tenant': 'Not A Slug' })).statusCode).toBe(400);
  });

  it('for a tenant that no longer exists: 401', async () => {
    const token = await issueToken(auth, { slug: 'never-provisioned' }, 'admin');
    expectInvalidToken(await getRoles({ authorization: `Bearer ${token}`, 'x-tenant': 'never-provisioned' }));
  });
});

describe('when keys rotate', () => {
  it('the first key signs, the others still verify, and the JWKS lists them all', async () => {
    const newer = await generatePrivateJwk();
    const rotated = await createTestAuth(db.pool, { keys: await createKeyRing([newer, jwk]) });
    const rotatedApp = await createTestApp(rotated);
    try {
      const oldToken = await issueToken(auth, tenant, 'admin');
      const newToken = await issueToken(rotated, tenant, 'admin');
      expect(decodeProtectedHeader(newToken).kid).toBe(newer.kid);
      for (const token of [oldToken, newToken]) {
        expect((await rotatedApp.inject({ method: 'GET', url: '/v1/roles', headers: bearer(token) })).statusCode).toBe(200);
      }
      const jwks = (await rotatedApp.inject({ method: 'GET', url: '/.well-known/jwks.json' })).json<{
        keys: Array<Record<string, unknown>>;
      }>();
      expect(jwks.keys.map((k) => k.kid)).toEqual([newer.kid, jwk.kid]);
      for (const key of jwks.keys) {
        expect(key).not.toHaveProperty('d');
        expect(key).toMatchObject({ kty: 'OKP', crv: 'Ed25519', alg: 'EdDSA', use: 'sig' });
      }
    } finally {
      await rotatedApp.close();
      await rotated.close();
    }
  });
});
