import { createCipheriv, createDecipheriv, type KeyObject } from 'node:crypto';
import { bufferedBytes } from '../random.ts';

/**
 * One value sealed with AES-256-GCM: `enc:A256GCM:<key id>:<base64url(nonce ‖ ciphertext ‖ tag)>`.
 * The prefix names the algorithm and the key, so keys and algorithms can change while older
 * values still open. A writer seals every personal value whatever it looks like, so a plain
 * value that happens to look sealed is sealed like any other. The header, and the field's place
 * when one is given, are the additional authenticated data, so a value cannot be moved under
 * another key id, or to another field, unnoticed.
 *
 * Every value gets a fresh random 96-bit nonce. Keys are per data subject and seal a few values
 * each, far below the 2^32 values per key where random GCM nonces stop being safe.
 */
export const SEALED_PREFIX = 'enc:';
const ALGORITHM = 'A256GCM';
const HEADER = `${SEALED_PREFIX}${ALGORITHM}:`;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;

/** A data key ready to use: its id (named in every value it seals) and the key itself. */
export type DataKey = { readonly keyId: string; readonly key: KeyObject };

const freshNonce = bufferedBytes();

// The whole shape, not just the prefix: a plain value may start with `enc:` (a name typed so),
// and only a value that parses as ours all through is ever taken for sealed.
/** The sealed form naming a key id of the form `keyIdForm` (a regular expression source), as a source too. */
export const sealedFormNaming = (keyIdForm: string): string =>
  `^${HEADER}${keyIdForm}:[A-Za-z0-9_-]{${Math.ceil(((NONCE_BYTES + TAG_BYTES) * 4) / 3)},}$`;
const SHAPE = new RegExp(sealedFormNaming('[A-Za-z0-9_-]+'));

/** The sealed form as a regular expression source (PostgreSQL reads it the same way). */
export const SEALED_FORM = SHAPE.source;

/** Has the full sealed form (header, key id, a body long enough for nonce and tag); opening may still fail. */
export const isSealed = (value: unknown): value is string => typeof value === 'string' && SHAPE.test(value);

/**
 * Where a personal field lives: its tenant, stream, event type and field name. Sealed with it as
 * additional authenticated data, so a value copied to another field, to an event of another type
 * or to another stream does not open there. Two events of one type on one stream share a place:
 * the event itself is not bound (a value moved between them opens, and stays the same person's).
 */
export const fieldPlace = (tenantId: string, streamId: string, eventType: string, field: string): string =>
  `${tenantId}\n${streamId}\n${eventType}\n${field}`;

/** `additionalData` binds the value to a context it must be opened in (besides its own header): a field's `fieldPlace`. */
export function sealValue(dataKey: DataKey, plain: string, additionalData?: string): string {
  const header = `${HEADER}${dataKey.keyId}:`;
  const nonce = freshNonce(NONCE_BYTES);
  const cipher = createCipheriv('aes-256-gcm', dataKey.key, nonce, { authTagLength: TAG_BYTES });
  cipher.setAAD(Buffer.from(additionalData === undefined ? header : header + additionalData, 'utf8'));
  const body = cipher.update(plain, 'utf8');
  cipher.final();
  return header + Buffer.concat([nonce, body, cipher.getAuthTag()]).toString('base64url');
}

/** The key id a sealed value names, or undefined when it is not one of ours. */
export function sealedKeyId(sealed: string): string | undefined {
  if (!isSealed(sealed)) return undefined;
  const end = sealed.indexOf(':', HEADER.length);
  return end < 0 ? undefined : sealed.slice(HEADER.length, end);
}

/** Opens a value sealed by `sealValue`; throws when it was not sealed with this key (or was altered). */
export function openValue(dataKey: DataKey, sealed: string, additionalData?: string): string {
  const keyId = sealedKeyId(sealed);
  if (keyId === undefined) throw new Error(`not a sealed value of algorithm ${ALGORITHM}`);
  if (keyId !== dataKey.keyId) throw new Error(`sealed with key ${keyId}, not ${dataKey.keyId}`);
  const header = `${HEADER}${keyId}:`;
  const raw = Buffer.from(sealed.slice(header.length), 'base64url');
  if (raw.length < NONCE_BYTES + TAG_BYTES) throw new Error('sealed value too short');
  const decipher = createDecipheriv('aes-256-gcm', dataKey.key, raw.subarray(0, NONCE_BYTES), { authTagLength: TAG_BYTES });
  decipher.setAAD(Buffer.from(additionalData === undefined ? header : header + additionalData, 'utf8'));
  decipher.setAuthTag(raw.subarray(raw.length - TAG_BYTES));
  const plain = decipher.update(raw.subarray(NONCE_BYTES, raw.length - TAG_BYTES));
  decipher.final();
  return plain.toString('utf8');
}
