import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findTenantBySlug } from '../../../services/tenants/tenants.ts';
import { MAX_OVERRIDE } from '../../../shared/rate-limit/policy.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { runOps } from '../../support/processes.ts';
import { provisionTenant } from '../../support/auth.ts';

/**
 * Regression: `tenants set-plan --rate-per-minute 20000000` was accepted silently (the limiter
 * then clamped it to 10,000,000 without a word) and 3e9 overflowed the int column with a stack
 * trace. docs/rate-limits.md: positive integers, at most 10,000,000 each.
 */
let db: TestDatabase;

const ops = (...args: string[]) => runOps(db.url, ...args);

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

describe('when an operator sets a rate override above the documented maximum', () => {
  it('set-plan and create refuse it with a one-line reason and exit code 1, changing nothing', { timeout: 60_000 }, async () => {
    expect(MAX_OVERRIDE).toBe(10_000_000);
    const tenant = await provisionTenant(db.pool, { plan: 'enterprise' });
    const cases = [
      ['set-plan', tenant.slug, '--rate-per-minute', '20000000', '--rate-burst', '100'],
      ['set-plan', tenant.slug, '--rate-per-minute', '600', '--rate-burst', '3000000000'],
      [
        'create',
        `t-${randomBytes(4).toString('hex')}`,
        '--plan',
        'pro',
        '--admin-email',
        'a@example.test',
        '--admin-password',
        'password1',
        '--rate-per-minute',
        '10000001',
        '--rate-burst',
        '10',
      ],
    ];
    for (const args of cases) {
      const result = await ops('tenants', ...args);
      expect({ args, code: result.code }).toEqual({ args, code: 1 });
      expect(result.stderr).toMatch(/at most 10,000,000/);
      expect(result.stderr).not.toMatch(/\n\s+at /); // no stack trace
    }
    expect((await findTenantBySlug(db.pool, tenant.slug))?.rateLimitOverride ?? null).toBeNull();
  });

  it('accepts the maximum itself', { timeout: 60_000 }, async () => {
    const tenant = await provisionTenant(db.pool, { plan: 'enterprise' });
    const result = await ops('tenants', 'set-plan', tenant.slug, '--rate-per-minute', '10000000', '--rate-burst', '10000000');
    expect(result.code).toBe(0);
    expect((await findTenantBySlug(db.pool, tenant.slug))?.rateLimitOverride).toEqual({ perMinute: 10_000_000, burst: 10_000_000 });
  });
});
