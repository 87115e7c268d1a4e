import type { ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { generateKekEntry } from '../../shared/personal-data/keyEncryptionKeys.ts';
import { loadConfig } from '../../shared/config.ts';
import { createKeyRing, generatePrivateJwk, type PrivateJwk } from '../../services/auth/keys.ts';
import { createTokenService } from '../../services/auth/tokens.ts';

/**
 * Shared by the scenarios that run the service as child processes (`services/main.ts gateway`,
 * `… projector employees`): one signing key for the children and the bench, admin headers per
 * tenant, and the children's environment (no Kafka, Redis or EventStoreDB).
 */
export type BenchAuth = { readonly jwk: PrivateJwk; adminHeaders(slug: string): Promise<Record<string, string>> };

export async function createBenchAuth(): Promise<BenchAuth> {
  const config = loadConfig({});
  const jwk = await generatePrivateJwk();
  const tokens = createTokenService({ keys: await createKeyRing([jwk]), issuer: config.JWT_ISSUER, audience: config.JWT_AUDIENCE });
  return {
    jwk,
    async adminHeaders(slug) {
      const { accessToken } = await tokens.issue({ userId: randomUUID(), tenant: slug, roles: ['admin'] });
      return { authorization: `Bearer ${accessToken}`, 'x-tenant': slug };
    },
  };
}

/**
 * The personal-data keys of this bench run, as the configuration takes them: the children and
 * the bench's own imports (which seal what they write, as the service does) share them.
 */
export const benchPersonalDataEnv = { KEY_ENCRYPTION_KEY: generateKekEntry(), EMAIL_HASH_KEY: randomBytes(32).toString('base64') };

/** The environment of a service child on `databaseUrl`, signing with `jwk` (PORT is the caller's). */
export const serviceEnv = (databaseUrl: string, jwk: PrivateJwk): Record<string, string> => ({
  ...benchPersonalDataEnv,
  DATABASE_URL: databaseUrl,
  HOST: '127.0.0.1',
  LOG_LEVEL: 'warn',
  NODE_ENV: 'production',
  JWT_PRIVATE_JWKS: JSON.stringify([jwk]),
  KAFKA_BROKERS: '',
  REDIS_URL: '',
  EVENTSTORE_URL: '',
});

/** SIGTERM, then wait for the exit (at once if the child has already gone). */
export async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await exited;
}
