import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { createTestApp, createTestAuth, createTestUser, provisionTenant } from '../../support/auth.ts';

let db: TestDatabase;
let app: FastifyInstance;
let auth: AuthDeps;

beforeAll(async () => {
  db = await createTestDatabase();
  // The throttle would turn repeated failures into fast 429s; this test measures the 401 path.
  auth = await createTestAuth(db.pool, { loginThrottle: { limit: 10_000, accountLimit: 10_000, ipLimit: 10_000 } });
  app = await createTestApp(auth);
});
afterAll(async () => {
  await app?.close();
  await auth?.close();
  await db?.drop();
});

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? (sorted[mid] ?? 0) : ((sorted[mid - 1] ?? 0) + (sorted[mid] ?? 0)) / 2;
};

describe('when a login fails', () => {
  it('takes about as long for an unknown e-mail as for a wrong password (medians within ±25 % over 40 tries each)', async () => {
    const tenant = await provisionTenant(db.pool);
    const user = await createTestUser(db.pool, tenant, 'employee');
    const timed = async (email: string) => {
      const started = performance.now();
      const response = await app.inject({
        method: 'POST',
        url: '/v1/auth/login',
        headers: { 'x-tenant': tenant.slug },
        payload: { email, password: 'not-the-password' },
      });
      const elapsed = performance.now() - started;
      expect(response.statusCode).toBe(401);
      return elapsed;
    };
    // Warm both paths, then interleave so that load changes hit both series alike.
    await timed(user.email);
    await timed('warm-up@example.test');
    const unknown: number[] = [];
    const wrongPassword: number[] = [];
    for (let i = 0; i < 40; i++) {
      unknown.push(await timed(`nobody-${i}@example.test`));
      wrongPassword.push(await timed(user.email));
    }
    const ratio = median(unknown) / median(wrongPassword);
    process.stdout.write(
      `login timing: unknown e-mail median ${median(unknown).toFixed(1)} ms, wrong password ${median(wrongPassword).toFixed(1)} ms, ratio ${ratio.toFixed(3)}\n`,
    );
    expect(ratio).toBeGreaterThanOrEqual(0.75);
    expect(ratio).toBeLessThanOrEqual(1.25);
  }, 180_000); // 82 argon2 verifications: seconds alone, much longer beside other suites
});
