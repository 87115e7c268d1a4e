import { createHmac, createSecretKey, randomBytes } from 'node:crypto';
import { normaliseEmail } from '../email.ts';
import { readOrCreateSecretFile } from '../secretFile.ts';

/**
 * A keyed hash (HMAC-SHA256) of a tenant's normalised e-mail address: what email uniqueness is
 * kept on, so no stream name or event holds the address. Keyed, because a plain hash of an
 * address is reversed by hashing a list of likely addresses; the key lives outside the database
 * (EMAIL_HASH_KEY, or a file under DATA_DIR). The tenant is part of the input, so the same
 * address in two tenants does not link them. Changing the key orphans every reservation: it is
 * not rotated like the key-encryption keys (docs/privacy.md).
 */
export type EmailHash = (tenantId: string, email: string) => string;

export function createEmailHash(key: Buffer): EmailHash {
  if (key.length < 32) throw new Error('the e-mail hash key must be at least 32 bytes');
  // Imported once: a raw key buffer would be imported again on every hire and email change.
  const secret = createSecretKey(key);
  return (tenantId, email) =>
    createHmac('sha256', secret)
      .update(`${tenantId}\n${normaliseEmail(email)}`)
      .digest('hex');
}

export const EMAIL_HASH_KEY_FILE = 'email-hash.key';

type EmailHashKeyConfig = { EMAIL_HASH_KEY?: string | undefined; DATA_DIR: string };

/** EMAIL_HASH_KEY (base64, 32 bytes; every process must share it), else DATA_DIR/email-hash.key, made on first use. */
export async function loadEmailHashKey(config: EmailHashKeyConfig): Promise<Buffer> {
  const text =
    config.EMAIL_HASH_KEY ?? (await readOrCreateSecretFile(config.DATA_DIR, EMAIL_HASH_KEY_FILE, () => randomBytes(32).toString('base64')));
  return Buffer.from(text.trim(), 'base64');
}

/** The hash keyed by `loadEmailHashKey`'s key. */
export async function loadEmailHash(config: EmailHashKeyConfig): Promise<EmailHash> {
  return createEmailHash(await loadEmailHashKey(config));
}
