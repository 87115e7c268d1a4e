import { randomUUID } from 'node:crypto';
import { exportJWK, generateKeyPair, importJWK, type CryptoKey, type JWK } from 'jose';
import { z } from 'zod';
import { readOrCreateSecretFile } from '../../shared/secretFile.ts';

/**
 * The signing keys. The first key signs; every key verifies, so rotation is: put the new key
 * first, keep the old one until the last token it signed has expired (15 minutes), then drop it.
 * Keys are imported once at start; verification never parses a JWK again.
 */
export type KeyRing = {
  readonly signing: { readonly kid: string; readonly key: CryptoKey };
  /** The verification key for a `kid`, or undefined for an unknown one. */
  verificationKey(kid: string): CryptoKey | undefined;
  /** The public half of every key, as served at /.well-known/jwks.json. */
  readonly jwks: { readonly keys: readonly JWK[] };
};

export const JWT_ALGORITHM = 'EdDSA';
export const KEYS_FILE = 'jwt-private-keys.json';

const privateJwkSchema = z.object({
  kty: z.literal('OKP'),
  crv: z.literal('Ed25519'),
  x: z.string().min(1),
  d: z.string().min(1),
  kid: z.string().min(1),
});
const privateJwksSchema = z.union([
  z.array(privateJwkSchema).min(1),
  z.object({ keys: z.array(privateJwkSchema).min(1) }).transform((v) => v.keys),
]);

export type PrivateJwk = z.infer<typeof privateJwkSchema>;

export async function generatePrivateJwk(): Promise<PrivateJwk> {
  const { privateKey } = await generateKeyPair('Ed25519', { extractable: true });
  return privateJwkSchema.parse({ ...(await exportJWK(privateKey)), kid: randomUUID() });
}

export async function createKeyRing(privateJwks: readonly PrivateJwk[]): Promise<KeyRing> {
  const first = privateJwks[0];
  if (!first) throw new Error('at least one signing key is required');
  if (new Set(privateJwks.map((k) => k.kid)).size !== privateJwks.length) throw new Error('JWT keys must have distinct kids');
  const verification = new Map<string, CryptoKey>();
  const publicJwks: JWK[] = [];
  for (const jwk of privateJwks) {
    const publicJwk = { kty: jwk.kty, crv: jwk.crv, x: jwk.x, kid: jwk.kid, alg: JWT_ALGORITHM, use: 'sig' };
    verification.set(jwk.kid, toCryptoKey(await importJWK(publicJwk, JWT_ALGORITHM)));
    publicJwks.push(publicJwk);
  }
  const signingKey = toCryptoKey(await importJWK({ ...first, alg: JWT_ALGORITHM }, JWT_ALGORITHM));
  return {
    signing: { kid: first.kid, key: signingKey },
    verificationKey: (kid) => verification.get(kid),
    jwks: { keys: publicJwks },
  };
}

function toCryptoKey(key: CryptoKey | Uint8Array): CryptoKey {
  if (key instanceof Uint8Array) throw new Error('expected an asymmetric key');
  return key;
}

export function parsePrivateJwks(json: string): PrivateJwk[] {
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch {
    throw new Error('JWT_PRIVATE_JWKS is not valid JSON');
  }
  const parsed = privateJwksSchema.safeParse(value);
  if (!parsed.success)
    throw new Error(
      `JWT_PRIVATE_JWKS must be a JSON array of Ed25519 private JWKs with kid (${parsed.error.issues[0]?.message ?? 'invalid'})`,
    );
  return parsed.data;
}

/**
 * Keys from JWT_PRIVATE_JWKS (several gateways share them), else from DATA_DIR, generated on
 * first start (readOrCreateSecretFile: processes starting together end up with the same key).
 */
export async function loadKeyRing(config: { JWT_PRIVATE_JWKS?: string | undefined; DATA_DIR: string }): Promise<KeyRing> {
  if (config.JWT_PRIVATE_JWKS) return createKeyRing(parsePrivateJwks(config.JWT_PRIVATE_JWKS));
  const text = await readOrCreateSecretFile(config.DATA_DIR, KEYS_FILE, async () => JSON.stringify([await generatePrivateJwk()], null, 2));
  return createKeyRing(parsePrivateJwks(text));
}
