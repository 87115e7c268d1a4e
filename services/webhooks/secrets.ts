import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { link, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * Signing secrets must be usable to sign (so they cannot be hashed) and must not be readable
 * from a database dump: they are sealed with AES-256-GCM under a key that lives outside the
 * database (WEBHOOK_SECRETS_KEY, or a file generated under DATA_DIR), and shown only once.
 */
export const generateSigningSecret = (): string => `whsec_${randomBytes(24).toString('base64')}`;

export type SecretBox = { seal(plain: string): string; open(sealed: string): string };

export function createSecretBox(key: Buffer): SecretBox {
  if (key.length !== 32) throw new Error('the webhook secrets key must be 32 bytes');
  return {
    seal(plain) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      const body = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
      return `v1.${Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64')}`;
    },
    open(sealed) {
      if (!sealed.startsWith('v1.')) throw new Error('unknown sealed-secret format');
      const raw = Buffer.from(sealed.slice(3), 'base64');
      const decipher = createDecipheriv('aes-256-gcm', key, raw.subarray(0, 12));
      decipher.setAuthTag(raw.subarray(12, 28));
      return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8');
    },
  };
}

const KEY_FILE = 'webhook-secrets.key';

/** WEBHOOK_SECRETS_KEY (base64, 32 bytes; every process must share it) or DATA_DIR/webhook-secrets.key, made on first use. */
export async function loadSecretBox(config: { WEBHOOK_SECRETS_KEY?: string | undefined; DATA_DIR: string }): Promise<SecretBox> {
  if (config.WEBHOOK_SECRETS_KEY) return createSecretBox(Buffer.from(config.WEBHOOK_SECRETS_KEY, 'base64'));
  const file = join(config.DATA_DIR, KEY_FILE);
  try {
    return createSecretBox(Buffer.from((await readFile(file, 'utf8')).trim(), 'base64'));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  await mkdir(config.DATA_DIR, { recursive: true });
  // Written aside, then linked into place: link fails if another process got there first, and
  // nobody ever reads a half-written key (processes sharing DATA_DIR start together).
  const aside = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`;
  await writeFile(aside, randomBytes(32).toString('base64'), { mode: 0o600 });
  try {
    await link(aside, file).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== 'EEXIST') throw error;
    });
  } finally {
    await rm(aside, { force: true });
  }
  return createSecretBox(Buffer.from((await readFile(file, 'utf8')).trim(), 'base64'));
}
