import { describe, expect, it } from 'vitest';
import { scramSha256Verifier } from '../../../services/analysts/scramVerifier.ts';

/**
 * The stored form of a SCRAM-SHA-256 verifier. That a real client logs in with it, and not with
 * another password, is checked against PostgreSQL itself, with SCRAM authentication switched on
 * (analystPassword.test.ts), rather than against a driver's internal SCRAM module here.
 */
describe('a SCRAM-SHA-256 verifier', () => {
  it("has PostgreSQL's stored form, salted afresh each time", () => {
    const a = scramSha256Verifier('correct horse battery staple');
    expect(a).toMatch(/^SCRAM-SHA-256\$4096:[A-Za-z0-9+/]{22}==\$[A-Za-z0-9+/]{43}=:[A-Za-z0-9+/]{43}=$/);
    expect(scramSha256Verifier('correct horse battery staple')).not.toBe(a);
  });
});
