import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generatePrivateJwk, KEYS_FILE, loadKeyRing, parsePrivateJwks } from '../../../services/auth/keys.ts';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'eas-keys-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('when no JWT_PRIVATE_JWKS is configured', () => {
  it('generates one Ed25519 key under DATA_DIR on first start (mode 0600) and reuses it afterwards', async () => {
    const dataDir = join(dir, 'a');
    const first = await loadKeyRing({ DATA_DIR: dataDir });
    const second = await loadKeyRing({ DATA_DIR: dataDir });
    expect(second.signing.kid).toBe(first.signing.kid);
    expect((await stat(join(dataDir, KEYS_FILE))).mode & 0o777).toBe(0o600);
    expect(parsePrivateJwks(await readFile(join(dataDir, KEYS_FILE), 'utf8'))).toHaveLength(1);
  });

  it('processes starting together agree on one key', async () => {
    const dataDir = join(dir, 'b');
    const rings = await Promise.all(Array.from({ length: 8 }, () => loadKeyRing({ DATA_DIR: dataDir })));
    expect(new Set(rings.map((r) => r.signing.kid)).size).toBe(1);
  });
});

describe('when JWT_PRIVATE_JWKS is configured', () => {
  it('signs with the first key and publishes every public key, never a private part', async () => {
    const [a, b] = [await generatePrivateJwk(), await generatePrivateJwk()];
    const ring = await loadKeyRing({ DATA_DIR: join(dir, 'unused'), JWT_PRIVATE_JWKS: JSON.stringify([a, b]) });
    expect(ring.signing.kid).toBe(a.kid);
    expect(ring.jwks.keys.map((k) => k.kid)).toEqual([a.kid, b.kid]);
    expect(JSON.stringify(ring.jwks)).not.toContain(a.d);
    expect(ring.verificationKey(b.kid)).toBeDefined();
    expect(ring.verificationKey('other')).toBeUndefined();
    // A JWKS object is accepted too.
    expect((await loadKeyRing({ DATA_DIR: dir, JWT_PRIVATE_JWKS: JSON.stringify({ keys: [b] }) })).signing.kid).toBe(b.kid);
  });

  it.each([
    ['not JSON', '{nope'],
    ['empty', '[]'],
    ['a public key only', JSON.stringify([{ kty: 'OKP', crv: 'Ed25519', x: 'abc', kid: 'k' }])],
    ['no kid', JSON.stringify([{ kty: 'OKP', crv: 'Ed25519', x: 'abc', d: 'def' }])],
    ['an RSA key', JSON.stringify([{ kty: 'RSA', n: 'abc', e: 'AQAB', d: 'x', kid: 'k' }])],
  ])('refuses %s with a message naming the variable', async (_case, value) => {
    await expect(loadKeyRing({ DATA_DIR: dir, JWT_PRIVATE_JWKS: value })).rejects.toThrow(/JWT_PRIVATE_JWKS/);
  });
});
