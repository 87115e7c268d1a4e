import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { readOrCreateSecretFile } from '../../shared/secretFile.ts';

/**
 * Signing secrets must be usable to sign (so they cannot be hashed) and must not be readable
 * from a database dump: they are sealed with AES-256-GCM under a key that lives outside the
 * database (WEBHOOK_SECRETS_KEY, or a file generated under DATA_DIR), and shown only once.
 *
 * Sealed form `v2.<key id>.<base64 iv|tag|ciphertext>`: the key id (a fingerprint of the key,
 * not the key) says which key opens it, so the key can be rotated: the current key seals, the
 * old ones (WEBHOOK_SECRETS_OLD_KEYS) still open. The first form, `v1.<base64>`, carries no key
 * id: every configured key is tried (GCM's tag tells the right one).
 */
export const generateSigningSecret = (): string => `whsec_${randomBytes(24).toString('base64')}`;

export type SecretBox = {
  seal(plain: string): string;
  /** The plain secret; throws SecretUnavailableError when no configured key opens it. */
  open(sealed: string): string;
  /**
   * Whether `sealed` opens with another key than the current one (sealing it again moves it to
   * the current key, so the other can be retired). A secret the current key opens is never
   * stale, in either form: sealing a `v1.` secret again as `v2.` would gain nothing and lock out
   * a worker from before key ids while a deploy still runs both.
   */
  isStale(sealed: string): boolean;
  /** The current key's id (what `v2.<id>.` sealed secrets name). */
  readonly keyId: string;
};

/**
 * A sealed secret that cannot be opened. The message reaches the tenant (the delivery log): it
 * names the key id at most, never a key or the secret.
 */
export class SecretUnavailableError extends Error {}

/** A key's id: a short fingerprint, safe to show (it does not help to guess the key). */
export const secretsKeyId = (key: Buffer): string =>
  createHash('sha256').update('webhook-secrets-key-id\0').update(key).digest('hex').slice(0, 12);

function openWith(key: Buffer, raw: Buffer): string | null {
  try {
    const decipher = createDecipheriv('aes-256-gcm', key, raw.subarray(0, 12));
    decipher.setAuthTag(raw.subarray(12, 28));
    return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8');
  } catch {
    return null; // not this key, or a damaged value: the caller says which
  }
}

/** Seals with `current`; opens with it and with every one of `old` (a rotation in progress). */
export function createSecretBox(current: Buffer, old: readonly Buffer[] = []): SecretBox {
  for (const key of [current, ...old]) if (key.length !== 32) throw new Error('a webhook secrets key must be 32 bytes');
  const keyId = secretsKeyId(current);
  const keys = new Map<string, Buffer>([...old.map((k) => [secretsKeyId(k), k] as const), [keyId, current]]);
  const unavailable = (why: string) => new SecretUnavailableError(`signing secret unavailable: ${why}; an operator must restore the key`);
  return {
    keyId,
    seal(plain) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', current, iv);
      const body = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
      return `v2.${keyId}.${Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64')}`;
    },
    open(sealed) {
      const v2 = /^v2\.([0-9a-f]+)\.(.*)$/s.exec(sealed);
      if (v2) {
        const [, id = '', body = ''] = v2;
        const key = keys.get(id);
        if (!key) throw unavailable(`it is sealed with key ${id}, which this service is not configured with`);
        const plain = openWith(key, Buffer.from(body, 'base64'));
        if (plain === null) throw unavailable(`it does not open with key ${id} (damaged)`);
        return plain;
      }
      if (sealed.startsWith('v1.')) {
        const raw = Buffer.from(sealed.slice(3), 'base64');
        for (const key of keys.values()) {
          const plain = openWith(key, raw);
          if (plain !== null) return plain;
        }
        throw unavailable('it is sealed without a key id and none of the configured keys opens it');
      }
      throw unavailable('unknown sealed-secret format');
    },
    isStale: (sealed) =>
      sealed.startsWith('v1.') ? openWith(current, Buffer.from(sealed.slice(3), 'base64')) === null : !sealed.startsWith(`v2.${keyId}.`),
  };
}

const KEY_FILE = 'webhook-secrets.key';

/**
 * WEBHOOK_SECRETS_KEY (base64, 32 bytes; every process must share it) or
 * DATA_DIR/webhook-secrets.key, made on first use; WEBHOOK_SECRETS_OLD_KEYS still open.
 */
export async function loadSecretBox(config: {
  WEBHOOK_SECRETS_KEY?: string | undefined;
  WEBHOOK_SECRETS_OLD_KEYS?: readonly string[] | undefined;
  DATA_DIR: string;
}): Promise<SecretBox> {
  const old = (config.WEBHOOK_SECRETS_OLD_KEYS ?? []).map((k) => Buffer.from(k, 'base64'));
  const box = (key: string) => createSecretBox(Buffer.from(key.trim(), 'base64'), old);
  if (config.WEBHOOK_SECRETS_KEY) return box(config.WEBHOOK_SECRETS_KEY);
  return box(await readOrCreateSecretFile(config.DATA_DIR, KEY_FILE, () => randomBytes(32).toString('base64')));
}
