import argon2 from 'argon2';

/**
 * argon2id at OWASP's recommended minimum (19 MiB, t=2, p=1): about 50 ms per hash here, which
 * keeps a login cheap for us and a guess expensive for an attacker. Parameters live in each
 * hash, so raising them later only affects new hashes (verification reads them from the hash).
 */
const OPTIONS = { type: argon2.argon2id, memoryCost: 19_456, timeCost: 2, parallelism: 1 } as const;

export const MIN_PASSWORD_LENGTH = 8;

export async function hashPassword(password: string): Promise<string> {
  return argon2.hash(password, OPTIONS);
}

let dummyHash: Promise<string> | undefined;

/**
 * Verifies `password` against `hash`; with no hash (unknown tenant or user, or an account that
 * has no password) it verifies against a dummy hash of the same cost, so the answer takes
 * about as long as for a wrong password and does not reveal whether the account exists.
 */
export async function verifyPassword(hash: string | null, password: string): Promise<boolean> {
  if (hash === null) {
    dummyHash ??= argon2.hash('dummy password for unknown accounts', OPTIONS);
    await argon2.verify(await dummyHash, password).catch(() => false);
    return false;
  }
  try {
    return await argon2.verify(hash, password);
  } catch {
    return false;
  }
}

/** Computes the dummy hash ahead of the first login so that login is not slower than the rest. */
export async function warmUpPasswordHashing(): Promise<void> {
  await verifyPassword(null, 'warm-up');
}
