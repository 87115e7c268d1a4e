import { createHash, createSecretKey, randomBytes } from 'node:crypto';
import { openValue, sealValue, type DataKey } from './fieldCipher.ts';
import { readOrCreateSecretFile } from '../secretFile.ts';

/**
 * The key-encryption keys (KEKs) that seal the data keys stored in PostgreSQL. They live
 * outside the database (the environment, or a file under DATA_DIR), so a dump of the database
 * alone opens nothing. The first key seals; every key opens: each sealed data key records the
 * id of the KEK that sealed it. Rotation is two-phase, since processes run side by side: add the
 * new key after the current one everywhere (it only opens), then move it first, then run
 * `npm run ops -- privacy rewrap-keys` (re-seals every data key under it), then drop the old one.
 *
 * Text form, in KEY_ENCRYPTION_KEY and in the file: entries `<id>:<base64 of 32 bytes>`,
 * separated by commas or new lines; a lone base64 value is one key whose id is derived from it.
 */
export type KeyEncryptionKeys = {
  /** Id of the KEK new data keys are sealed with. */
  readonly currentId: string;
  /** Seals a data key under the current KEK; `context` (its subject) must be given again to open it. */
  wrap(rawKey: Buffer, context: string): { readonly kekId: string; readonly sealed: string };
  /** Opens a data key; throws when `kekId` is unknown or the value was altered or moved. */
  unwrap(kekId: string, sealed: string, context: string): Buffer;
  /** Every key, ready to use (a `KeyObject` each): what a worker thread that opens data keys is given. */
  readonly all: readonly DataKey[];
};

export const KEK_FILE = 'key-encryption-keys';

const ENTRY = /^(?:([A-Za-z0-9_-]{1,32}):)?([A-Za-z0-9+/]{43}=)$/;

export type KekEntry = { readonly id: string; readonly key: Buffer };

/** Parses the text form; throws naming what is wrong (never the key). */
export function parseKeyEncryptionKeys(text: string): KekEntry[] {
  const entries = text
    .split(/[,\n]/)
    .map((e) => e.trim())
    .filter(Boolean);
  if (entries.length === 0) throw new Error('no key-encryption key given');
  const parsed = entries.map((entry, index) => {
    const match = ENTRY.exec(entry);
    if (!match?.[2]) throw new Error(`key-encryption key ${index + 1}: expected <id>:<base64 of 32 bytes>`);
    const key = Buffer.from(match[2], 'base64');
    if (key.length !== 32) throw new Error(`key-encryption key ${index + 1}: must be 32 bytes`);
    return { id: match[1] ?? `k${createHash('sha256').update(key).digest('hex').slice(0, 12)}`, key };
  });
  if (new Set(parsed.map((e) => e.id)).size !== parsed.length) throw new Error('key-encryption keys must have distinct ids');
  return parsed;
}

export function createKeyEncryptionKeys(entries: readonly KekEntry[]): KeyEncryptionKeys {
  return keyEncryptionKeysOf(entries.map((e) => ({ keyId: e.id, key: createSecretKey(e.key) })));
}

/** The same from keys already imported (the first seals): how a worker thread rebuilds them from `all`. */
export function keyEncryptionKeysOf(all: readonly DataKey[]): KeyEncryptionKeys {
  const current = all[0];
  if (!current) throw new Error('at least one key-encryption key is required');
  const keys = new Map<string, DataKey>(all.map((k) => [k.keyId, k]));
  return {
    currentId: current.keyId,
    all,
    wrap: (rawKey, context) => ({ kekId: current.keyId, sealed: sealValue(current, rawKey.toString('base64'), context) }),
    unwrap(kekId, sealed, context) {
      const kek = keys.get(kekId);
      if (!kek) throw new Error(`data key sealed with key-encryption key ${kekId}, which is not configured`);
      return Buffer.from(openValue(kek, sealed, context), 'base64');
    },
  };
}

/** A new entry for the text form (a fresh key and a fresh id). */
export const generateKekEntry = (): string => `k${randomBytes(6).toString('hex')}:${randomBytes(32).toString('base64')}`;

/** KEY_ENCRYPTION_KEY (every process must share it), else DATA_DIR/key-encryption-keys, made on first use. */
export async function loadKeyEncryptionKeys(config: {
  KEY_ENCRYPTION_KEY?: string | undefined;
  DATA_DIR: string;
}): Promise<KeyEncryptionKeys> {
  const text = config.KEY_ENCRYPTION_KEY ?? (await readOrCreateSecretFile(config.DATA_DIR, KEK_FILE, () => `${generateKekEntry()}\n`));
  return createKeyEncryptionKeys(parseKeyEncryptionKeys(text));
}
