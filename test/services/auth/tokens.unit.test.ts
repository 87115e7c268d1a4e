import { describe, expect, it } from 'vitest';
import { createKeyRing, generatePrivateJwk } from '../../../services/auth/keys.ts';
import { ACCESS_TOKEN_TTL_SECONDS, createTokenService, InvalidAccessTokenError } from '../../../services/auth/tokens.ts';

const service = async (cacheSize: number, now?: () => number) =>
  createTokenService({ keys: await createKeyRing([await generatePrivateJwk()]), issuer: 'test', audience: 'test', cacheSize, now });

const subject = (userId: string) => ({ userId, tenant: 'acme', roles: ['admin'] });

describe('the verified-token cache', () => {
  it('answers a token it verified with the same result, and forgets the least recently used one when full', async () => {
    const tokens = await service(2);
    const [a, b, c] = await Promise.all(['a', 'b', 'c'].map(async (id) => (await tokens.issue(subject(id))).accessToken));
    const first = { a: await tokens.verify(a ?? ''), b: await tokens.verify(b ?? '') };
    expect(await tokens.verify(a ?? '')).toBe(first.a); // remembered, and now the most recently used
    await tokens.verify(c ?? ''); // the cache is full: b goes, not a
    expect(await tokens.verify(a ?? '')).toBe(first.a);
    const again = await tokens.verify(b ?? '');
    expect(again).not.toBe(first.b);
    expect(again).toEqual(first.b); // verified afresh, to the same claims
  });

  it('keeps one token at least when told a size below one, and more when told no number or too many', async () => {
    const twoTokens = async (size: number) => {
      const tokens = await service(size);
      const [a, b] = await Promise.all(['a', 'b'].map(async (id) => (await tokens.issue(subject(id))).accessToken));
      const first = await tokens.verify(a ?? '');
      await tokens.verify(b ?? '');
      return (await tokens.verify(a ?? '')) === first; // still remembered after another token
    };
    expect(await twoTokens(0)).toBe(false);
    expect(await twoTokens(-1)).toBe(false);
    for (const size of [Number.NaN, Number.POSITIVE_INFINITY, 2 ** 32]) expect(await twoTokens(size)).toBe(true);
  });

  it('answers a remembered token until it expires, then refuses it as expired', async () => {
    let clock = Date.UTC(2026, 0, 1);
    const tokens = await service(10, () => clock);
    const token = (await tokens.issue(subject('x'))).accessToken;
    const first = await tokens.verify(token);
    clock += ACCESS_TOKEN_TTL_SECONDS * 1000;
    expect(await tokens.verify(token)).toBe(first); // from the cache, within the clock tolerance
    clock += 60_000;
    const refused = await tokens.verify(token).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(InvalidAccessTokenError);
    expect(refused).toMatchObject({ reason: 'expired' });
  });
});
