import { createCipheriv, randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  createSecretBox,
  generateSigningSecret,
  loadSecretBox,
  secretsKeyId,
  SecretUnavailableError,
} from '../../../services/webhooks/secrets.ts';

describe('when processes sharing DATA_DIR seal webhook secrets', () => {
  it('they agree on one generated key, and a sealed secret opens only with it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'eas-whsec-'));
    try {
      const boxes = await Promise.all(Array.from({ length: 8 }, () => loadSecretBox({ DATA_DIR: dir })));
      const secret = generateSigningSecret();
      const sealed = boxes[0]?.seal(secret) ?? '';
      expect(sealed).not.toContain(secret.slice(6));
      for (const box of boxes) expect(box.open(sealed)).toBe(secret);
      const other = await loadSecretBox({ DATA_DIR: dir, WEBHOOK_SECRETS_KEY: Buffer.alloc(32, 9).toString('base64') });
      expect(() => other.open(sealed)).toThrow();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('when the sealing key is rotated', () => {
  it('seals under the current key id, opens under old ones, and says which key is missing without showing any', () => {
    const oldKey = Buffer.alloc(32, 1);
    const newKey = Buffer.alloc(32, 2);
    const secret = generateSigningSecret();
    const before = createSecretBox(oldKey).seal(secret);
    const rotated = createSecretBox(newKey, [oldKey]);
    expect(before.startsWith(`v2.${secretsKeyId(oldKey)}.`)).toBe(true);
    expect(rotated.open(before)).toBe(secret);
    expect(rotated.isStale(before)).toBe(true);
    const after = rotated.seal(secret);
    expect(after.startsWith(`v2.${rotated.keyId}.`)).toBe(true);
    expect(rotated.isStale(after)).toBe(false);
    expect(secretsKeyId(newKey)).toBe(rotated.keyId);
    expect(() => createSecretBox(newKey).open(before)).toThrow(SecretUnavailableError);
    expect(() => createSecretBox(newKey).open(before)).toThrow(`sealed with key ${secretsKeyId(oldKey)}`);
    expect(() => createSecretBox(newKey).open('v1.AAAA')).toThrow(/without a key id/);
  });

  it('loads old keys from WEBHOOK_SECRETS_OLD_KEYS', async () => {
    const oldKey = Buffer.alloc(32, 3);
    const sealed = createSecretBox(oldKey).seal('whsec_x');
    const box = await loadSecretBox({
      DATA_DIR: tmpdir(),
      WEBHOOK_SECRETS_KEY: Buffer.alloc(32, 4).toString('base64'),
      WEBHOOK_SECRETS_OLD_KEYS: [oldKey.toString('base64')],
    });
    expect(box.open(sealed)).toBe('whsec_x');
  });
});

/** The sealed form from before key ids: `v1.` + base64 of iv, tag, ciphertext. */
function sealWithoutKeyId(key: Buffer, plain: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  const body = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
  return `v1.${Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64')}`;
}

describe('whether a sealed secret is stale (sealed again at its next delivery)', () => {
  const current = Buffer.alloc(32, 5);
  const old = Buffer.alloc(32, 6);
  const box = createSecretBox(current, [old]);

  it('is not, for a secret the current key opens, in either form: a worker from before key ids still opens the first', () => {
    expect(box.isStale(sealWithoutKeyId(current, 'whsec_a'))).toBe(false);
    expect(box.isStale(box.seal('whsec_a'))).toBe(false);
  });

  it('is, for a secret only an old key opens, in either form', () => {
    expect(box.isStale(sealWithoutKeyId(old, 'whsec_b'))).toBe(true);
    expect(box.isStale(createSecretBox(old).seal('whsec_b'))).toBe(true);
    expect(box.open(sealWithoutKeyId(old, 'whsec_b'))).toBe('whsec_b');
  });
});
