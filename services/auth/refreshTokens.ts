import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { z } from 'zod';
import { ignoredRows, sql, type Queryable } from '../../shared/db/pool.ts';

/**
 * Refresh tokens: 256 random bits, opaque to clients, stored only as their sha256 digest.
 * Each is single-use: using it rotates it (marks it used, issues a successor in the same
 * family). Presenting a used one again means it leaked, so the whole family is revoked.
 * Every function expects a transaction opened with `withTenant`, and every query also names
 * `tenantId` explicitly (on each table it touches): row-level security is the second wall.
 */
export const REFRESH_TOKEN_TTL_SECONDS = 14 * 24 * 60 * 60;

export const hashRefreshToken = (token: string) => createHash('sha256').update(token).digest('hex');

export async function issueRefreshToken(
  tx: Queryable,
  input: { tenantId: string; userId: string; familyId?: string; now: number },
): Promise<string> {
  const token = randomBytes(32).toString('base64url');
  const expiresAt = new Date(input.now + REFRESH_TOKEN_TTL_SECONDS * 1000).toISOString();
  await tx.query(sql.type(ignoredRows)`
    insert into refresh_tokens (tenant_id, user_id, family_id, token_hash, expires_at)
    values (${input.tenantId}, ${input.userId}, ${input.familyId ?? randomUUID()}, ${hashRefreshToken(token)}, ${expiresAt})
  `);
  return token;
}

export type RotationResult =
  | { readonly kind: 'rotated'; readonly userId: string; readonly role: string; readonly refreshToken: string }
  /** A used token was presented again: its family is now revoked. */
  | { readonly kind: 'reused' }
  | { readonly kind: 'invalid' };

const tokenRow = z.object({
  id: z.string(),
  user_id: z.string(),
  family_id: z.string(),
  expired: z.boolean(),
  rotated: z.boolean(),
  revoked: z.boolean(),
  user_disabled: z.boolean(),
  role: z.string(),
});

async function revokeFamilyById(tx: Queryable, tenantId: string, familyId: string): Promise<void> {
  await tx.query(sql.type(ignoredRows)`
    update refresh_tokens set revoked_at = now() where tenant_id = ${tenantId} and family_id = ${familyId} and revoked_at is null
  `);
}

/** The caller must commit even for `reused`: the family's revocation is the point. */
export async function rotateRefreshToken(
  tx: Queryable,
  input: { tenantId: string; refreshToken: string; now: number },
): Promise<RotationResult> {
  // FOR UPDATE serialises two concurrent uses of one token: the second sees it rotated.
  const row = await tx.maybeOne(sql.type(tokenRow)`
    select t.id, t.user_id, t.family_id, t.expires_at <= ${new Date(input.now).toISOString()}::timestamptz as expired,
      t.rotated_at is not null as rotated, t.revoked_at is not null as revoked,
      u.disabled_at is not null as user_disabled, r.name as role
    from refresh_tokens t
      join users u on u.id = t.user_id and u.tenant_id = ${input.tenantId}
      join roles r on r.id = u.role_id and r.tenant_id = ${input.tenantId}
    where t.tenant_id = ${input.tenantId} and t.token_hash = ${hashRefreshToken(input.refreshToken)}
    for update of t
  `);
  if (!row || row.revoked) return { kind: 'invalid' };
  if (row.rotated) {
    await revokeFamilyById(tx, input.tenantId, row.family_id);
    return { kind: 'reused' };
  }
  if (row.expired || row.user_disabled) {
    await revokeFamilyById(tx, input.tenantId, row.family_id);
    return { kind: 'invalid' };
  }
  await tx.query(
    sql.type(ignoredRows)`update refresh_tokens set rotated_at = now() where tenant_id = ${input.tenantId} and id = ${row.id}`,
  );
  const refreshToken = await issueRefreshToken(tx, {
    tenantId: input.tenantId,
    userId: row.user_id,
    familyId: row.family_id,
    now: input.now,
  });
  return { kind: 'rotated', userId: row.user_id, role: row.role, refreshToken };
}

const familyRow = z.object({ family_id: z.string() });

/** Logout: revokes the token's family. Unknown tokens are ignored (revocation is idempotent). */
export async function revokeRefreshTokenFamily(
  tx: Queryable,
  input: { tenantId: string; refreshToken: string; userId: string },
): Promise<void> {
  const familyId = await tx.maybeOneFirst(sql.type(familyRow)`
    select family_id from refresh_tokens
    where tenant_id = ${input.tenantId} and token_hash = ${hashRefreshToken(input.refreshToken)} and user_id = ${input.userId}
  `);
  if (familyId) await revokeFamilyById(tx, input.tenantId, familyId);
}
