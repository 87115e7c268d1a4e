import { createHash, createHmac, randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { scramSha256Verifier } from '../../../services/analysts/scramVerifier.ts';

/**
 * The stored verifier must let a real client log in: this plays the PostgreSQL side of a
 * SCRAM-SHA-256 exchange from nothing but the verifier, against the `pg` driver's own client
 * (the code BI tools' drivers mirror), and checks both proofs.
 */
type Session = { response: string; serverSignature?: string };
const sasl = createRequire(import.meta.url)('pg/lib/crypto/sasl.js') as {
  startSession(mechanisms: string[]): Session;
  continueSession(session: Session, password: string, serverData: string): Promise<void>;
  finalizeSession(session: Session, serverData: string): void;
};

/** Runs one exchange: `clientPassword` against the server that stored `verifier`; true if the server accepts. */
async function logIn(verifier: string, clientPassword: string): Promise<boolean> {
  const [, iterations = '', salt = '', storedKey = '', serverKey = ''] =
    /^SCRAM-SHA-256\$(\d+):([^$]+)\$([^:]+):(.+)$/.exec(verifier) ?? [];
  const session = sasl.startSession(['SCRAM-SHA-256']);
  const clientFirstBare = session.response.slice('n,,'.length);
  const nonce = `${/r=(.+)$/.exec(clientFirstBare)?.[1]}${randomBytes(18).toString('base64')}`;
  const serverFirst = `r=${nonce},s=${salt},i=${iterations}`;
  await sasl.continueSession(session, clientPassword, serverFirst);
  const clientFinal = session.response;
  const withoutProof = clientFinal.slice(0, clientFinal.indexOf(',p='));
  const proof = Buffer.from(clientFinal.slice(clientFinal.indexOf(',p=') + 3), 'base64');
  const authMessage = `${clientFirstBare},${serverFirst},${withoutProof}`;
  const clientSignature = createHmac('sha256', Buffer.from(storedKey, 'base64')).update(authMessage).digest();
  const clientKey = Buffer.from(proof.map((b, i) => b ^ (clientSignature[i] ?? 0)));
  if (createHash('sha256').update(clientKey).digest('base64') !== storedKey) return false;
  const serverSignature = createHmac('sha256', Buffer.from(serverKey, 'base64')).update(authMessage).digest('base64');
  sasl.finalizeSession(session, `v=${serverSignature}`); // throws if the client does not recognise the server
  return true;
}

describe('a SCRAM-SHA-256 verifier', () => {
  it("has PostgreSQL's stored form, salted afresh each time", () => {
    const a = scramSha256Verifier('correct horse battery staple');
    expect(a).toMatch(/^SCRAM-SHA-256\$4096:[A-Za-z0-9+/]{22}==\$[A-Za-z0-9+/]{43}=:[A-Za-z0-9+/]{43}=$/);
    expect(scramSha256Verifier('correct horse battery staple')).not.toBe(a);
  });

  it("lets the pg driver's SCRAM client in with the password, and not with another", async () => {
    const verifier = scramSha256Verifier('s3cret-Pass_word.with~punct!');
    await expect(logIn(verifier, 's3cret-Pass_word.with~punct!')).resolves.toBe(true);
    await expect(logIn(verifier, 's3cret-Pass_word.with~punct?')).resolves.toBe(false);
  });
});
