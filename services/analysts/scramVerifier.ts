import { createHash, createHmac, pbkdf2Sync, randomBytes } from 'node:crypto';

/** PostgreSQL's own default (`scram_iterations`), which its clients and `\password` use too. */
const ITERATIONS = 4096;

/**
 * The SCRAM-SHA-256 verifier PostgreSQL stores for `password` (RFC 5802 and 7677, in the form
 * `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`), computed here as psql's
 * `\password` does, so the password itself never reaches the server: a `CREATE ROLE … PASSWORD`
 * with the clear text would sit in the server's statement log. PostgreSQL stores a verifier it is
 * given as it is. Passwords are printable ASCII (the caller checks), which SASLprep leaves alone.
 */
export function scramSha256Verifier(password: string, salt: Buffer = randomBytes(16)): string {
  const salted = pbkdf2Sync(Buffer.from(password, 'utf8'), salt, ITERATIONS, 32, 'sha256');
  const clientKey = createHmac('sha256', salted).update('Client Key').digest();
  const storedKey = createHash('sha256').update(clientKey).digest();
  const serverKey = createHmac('sha256', salted).update('Server Key').digest();
  return `SCRAM-SHA-256$${ITERATIONS}:${salt.toString('base64')}$${storedKey.toString('base64')}:${serverKey.toString('base64')}`;
}
