/**
 * Login under abuse: the latency of a real login from one address, quiet
 * (baseline) and while 40 junk logins arrive at once — from one attacker address (what the
 * per-address verification gate is for) and from 40 addresses (a botnet, which per-address
 * bounds cannot tell from users; reported, no goal). Rounds alternate quiet/loaded; medians.
 * Goal: one-address junk keeps the real login's median below 3× its quiet median.
 *
 *   npm run bench -- login-abuse          # BENCH_ROUNDS rounds (default 9)
 *
 * In-process (`app.inject`, client address set per request): the gateway, the argon2 work and
 * the junk share one process, as they would in a gateway under attack.
 */
import { randomBytes } from 'node:crypto';
import { Registry } from 'prom-client';
import { createDatabasePool, withTenant } from '../../shared/db/pool.ts';
import { createGateway } from '../../services/gateway/app.ts';
import { createAuthDeps } from '../../services/auth/plugin.ts';
import { authRoutes } from '../../services/auth/routes.ts';
import { createKeyRing, generatePrivateJwk } from '../../services/auth/keys.ts';
import { createUser } from '../../services/auth/users.ts';
import { provisionTenant } from '../../services/tenants/provision.ts';
import { createBenchDatabase } from '../support/database.ts';
import { median } from '../support/measure.ts';

export type LoginAbuseResult = {
  readonly name: string;
  readonly rounds: number;
  /** Median real-login latency (ms) with nothing else going on. */
  readonly quietMs: number;
  /** Median beside 40 concurrent junk logins from one address, and its ratio to quiet. */
  readonly oneAddress: { readonly ms: number; readonly ratio: number; readonly junkStatuses: Record<string, number> };
  /** Median beside 40 concurrent junk logins from 40 addresses, and its ratio to quiet. */
  readonly manyAddresses: { readonly ms: number; readonly ratio: number; readonly junkStatuses: Record<string, number> };
};

const say = (message: string) => process.stderr.write(`[bench login-abuse] ${message}\n`);

export async function runLoginAbuseBench(options: { rounds?: number } = {}): Promise<LoginAbuseResult> {
  const rounds = options.rounds ?? Number(process.env.BENCH_ROUNDS ?? 9);
  const database = await createBenchDatabase('bench_login');
  const pool = await createDatabasePool(database.url, { maximumPoolSize: 20 });
  const auth = await createAuthDeps({
    pool,
    config: { JWT_ISSUER: 'bench', JWT_AUDIENCE: 'bench', JWT_PRIVATE_JWKS: undefined, DATA_DIR: '.tmp/bench-login' },
    keys: await createKeyRing([await generatePrivateJwk()]),
    loginThrottle: { keyPrefix: `bench:login:${randomBytes(4).toString('hex')}` },
  });
  const app = await createGateway({
    config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'production' },
    readiness: [],
    registry: new Registry(),
    v1: [authRoutes(auth)],
  });
  try {
    const { tenant } = await provisionTenant(pool, { slug: `bench-${randomBytes(4).toString('hex')}`, plan: 'enterprise' });
    const email = `real-${randomBytes(3).toString('hex')}@example.test`;
    const password = `pw-${randomBytes(8).toString('hex')}`;
    await withTenant(pool, tenant.id, (tx) => createUser(tx, { tenantId: tenant.id, email, password, role: 'employee' }));
    const login = (ip: string, as: string, secret: string) =>
      app.inject({
        method: 'POST',
        url: '/v1/auth/login',
        remoteAddress: ip,
        headers: { 'x-tenant': tenant.slug },
        payload: { email: as, password: secret },
      });
    const real = async () => {
      const started = performance.now();
      const response = await login('192.0.2.10', email, password);
      if (response.statusCode !== 200) throw new Error(`real login: ${response.statusCode} ${response.body}`);
      return performance.now() - started;
    };
    const statuses = (into: Record<string, number>, codes: readonly number[]) => {
      for (const code of codes) into[code] = (into[code] ?? 0) + 1;
    };
    const beside = async (junkAddress: (i: number) => string, round: number, into: Record<string, number>) => {
      const junk = Array.from({ length: 40 }, (_, i) => login(junkAddress(i), `junk-${round}-${i}@example.test`, 'not-a-password'));
      const elapsed = await real();
      statuses(
        into,
        (await Promise.all(junk)).map((r) => r.statusCode),
      );
      return elapsed;
    };
    await real(); // warm-up (dummy hash, JIT, pool)
    const quiet: number[] = [];
    const one: number[] = [];
    const many: number[] = [];
    const oneStatuses: Record<string, number> = {};
    const manyStatuses: Record<string, number> = {};
    for (let round = 0; round < rounds; round++) {
      quiet.push(await real());
      // Fresh addresses each round: the per-address failure counter is a second defence, which
      // would otherwise turn later rounds into cheap 429s and hide what the gate does.
      one.push(await beside(() => `198.51.${round}.1`, round, oneStatuses));
      quiet.push(await real());
      many.push(await beside((i) => `203.${round}.${i}.1`, round, manyStatuses));
      say(
        `round ${round + 1}: quiet ${quiet.at(-1)?.toFixed(0)} ms, one-address junk ${one.at(-1)?.toFixed(0)} ms, 40-address junk ${many.at(-1)?.toFixed(0)} ms`,
      );
    }
    const quietMs = median(quiet);
    const result: LoginAbuseResult = {
      name: 'login-abuse: real login latency, quiet vs beside 40 concurrent junk logins',
      rounds,
      quietMs,
      oneAddress: { ms: median(one), ratio: median(one) / quietMs, junkStatuses: oneStatuses },
      manyAddresses: { ms: median(many), ratio: median(many) / quietMs, junkStatuses: manyStatuses },
    };
    say(
      `quiet ${quietMs.toFixed(0)} ms; one-address junk ${result.oneAddress.ms.toFixed(0)} ms (×${result.oneAddress.ratio.toFixed(2)}, goal < 3); ` +
        `40-address junk ${result.manyAddresses.ms.toFixed(0)} ms (×${result.manyAddresses.ratio.toFixed(2)}, no goal)`,
    );
    return result;
  } finally {
    await app.close();
    await auth.close();
    await pool.end();
    await database.drop().catch(() => undefined);
  }
}
