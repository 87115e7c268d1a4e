import { createSecretKey, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { isSealed, openValue, sealValue, sealedKeyId } from '../../../shared/personal-data/fieldCipher.ts';
import { createKeyEncryptionKeys, generateKekEntry, parseKeyEncryptionKeys } from '../../../shared/personal-data/keyEncryptionKeys.ts';

const dataKey = (keyId = 'key-1') => ({ keyId, key: createSecretKey(randomBytes(32)) });

describe('a sealed value', () => {
  it('names its algorithm and key, hides the value, and opens with the same key', () => {
    const key = dataKey();
    const sealed = sealValue(key, 'ada@example.test');
    expect(sealed).toMatch(/^enc:A256GCM:key-1:[A-Za-z0-9_-]+$/);
    expect(sealed).not.toContain('ada');
    expect(isSealed(sealed)).toBe(true);
    expect(sealedKeyId(sealed)).toBe('key-1');
    expect(openValue(key, sealed)).toBe('ada@example.test');
  });

  it('gets a fresh nonce every time: the same value never seals to the same text', () => {
    const key = dataKey();
    const sealed = new Set(Array.from({ length: 1_000 }, () => sealValue(key, 'Ada')));
    expect(sealed.size).toBe(1_000);
    const nonces = new Set(
      [...sealed].map((s) =>
        Buffer.from(s.split(':')[3] ?? '', 'base64url')
          .subarray(0, 12)
          .toString('hex'),
      ),
    );
    expect(nonces.size).toBe(1_000);
  });

  it('does not open with another key, under another key id, or once altered', () => {
    const key = dataKey();
    const sealed = sealValue(key, 'Lovelace');
    expect(() => openValue(dataKey(), sealed)).toThrow();
    expect(() => openValue({ ...key, keyId: 'key-2' }, sealed.replace(':key-1:', ':key-2:'))).toThrow();
    const body = Buffer.from(sealed.split(':')[3] ?? '', 'base64url');
    body[14] = (body[14] ?? 0) ^ 1;
    expect(() => openValue(key, `enc:A256GCM:key-1:${body.toString('base64url')}`)).toThrow();
  });

  it('is told apart from plain values', () => {
    expect(isSealed('ada@example.test')).toBe(false);
    expect(isSealed(null)).toBe(false);
    expect(isSealed(42)).toBe(false);
    // Only the full form counts: a plain value may start like one.
    for (const plain of ['enc:x', 'enc:A256GCM:a:b', 'enc:A256GCM:key-1:', 'enc:A256GCM::abc']) expect(isSealed(plain)).toBe(false);
    expect(isSealed(sealValue(dataKey(), ''))).toBe(true);
  });
});

describe('the key-encryption keys', () => {
  it('seal with the first key and still open what an older key sealed (rotation)', () => {
    const [oldEntry, newEntry] = [generateKekEntry(), generateKekEntry()];
    const before = createKeyEncryptionKeys(parseKeyEncryptionKeys(oldEntry));
    const raw = randomBytes(32);
    const wrapped = before.wrap(raw, 'tenant/subject/key');
    const after = createKeyEncryptionKeys(parseKeyEncryptionKeys(`${newEntry},${oldEntry}`));
    expect(after.currentId).not.toBe(wrapped.kekId);
    expect(after.unwrap(wrapped.kekId, wrapped.sealed, 'tenant/subject/key')).toEqual(raw);
    expect(after.wrap(raw, 'x').kekId).toBe(after.currentId);
    // Bound to its subject: a sealed key copied to another subject's row does not open.
    expect(() => after.unwrap(wrapped.kekId, wrapped.sealed, 'tenant/other/key')).toThrow();
    // Without the old key, nothing it sealed opens.
    expect(() =>
      createKeyEncryptionKeys(parseKeyEncryptionKeys(newEntry)).unwrap(wrapped.kekId, wrapped.sealed, 'tenant/subject/key'),
    ).toThrow(/not configured/);
  });

  it('accept a lone base64 key and refuse malformed or duplicate entries', () => {
    const key = randomBytes(32).toString('base64');
    expect(parseKeyEncryptionKeys(key)[0]?.id).toMatch(/^k[0-9a-f]{12}$/);
    expect(() => parseKeyEncryptionKeys('a:short')).toThrow(/32 bytes/);
    expect(() => parseKeyEncryptionKeys(`a:${key},a:${key}`)).toThrow(/distinct/);
    expect(() => parseKeyEncryptionKeys(' ')).toThrow();
  });
});
