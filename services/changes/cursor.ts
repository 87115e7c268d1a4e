import { START, type GlobalPosition } from '../../shared/event-store/port.ts';

/**
 * The feed cursor: opaque to clients, `base64url("c1:<commit>:<prepare>")` — a versioned log
 * position, so the encoding can change (a `c2`) without breaking cursors already stored.
 * Decoding is strict: anything that does not re-encode to itself is malformed.
 */
const PATTERN = /^c1:(0|[1-9]\d{0,19}):(0|[1-9]\d{0,19})$/;
const MAX_U64 = (1n << 64n) - 1n;

export function encodeCursor(position: GlobalPosition): string {
  return Buffer.from(`c1:${position.commit}:${position.prepare}`, 'utf8').toString('base64url');
}

export function decodeCursor(cursor: string): GlobalPosition | undefined {
  if (cursor.length === 0 || cursor.length > 64 || !/^[A-Za-z0-9_-]+$/.test(cursor)) return undefined;
  const match = PATTERN.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  if (!match?.[1] || !match[2]) return undefined;
  const position = { commit: BigInt(match[1]), prepare: BigInt(match[2]) };
  if (position.commit > MAX_U64 || position.prepare > MAX_U64) return undefined;
  return encodeCursor(position) === cursor ? position : undefined;
}

/** The cursor before the first change of every tenant (what omitting `after` means). */
export const START_CURSOR = encodeCursor(START);
