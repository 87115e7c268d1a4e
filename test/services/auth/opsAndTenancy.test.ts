import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AuthContext } from '../../../services/gateway/requestContext.ts';
import { authenticated, type AuthDeps } from '../../../services/auth/plugin.ts';
import { cutTenantAccess } from '../../../services/tenants/offboarding.ts';
import { bootstrapTenant } from '../../../services/tenants/bootstrap.ts';
import { findTenantBySlug } from '../../../services/tenants/tenants.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { runOps } from '../../support/processes.ts';
import { authHeaders, createTestApp, createTestAuth } from '../../support/auth.ts';
import { waitFor } from '../../support/waitFor.ts';

let db: TestDatabase;
let auth: AuthDeps;
let app: FastifyInstance;

const ops = (...args: string[]) => runOps(db.url, ...args);

const login = (slug: string, email: string, password: string) =>
  app.inject({ method: 'POST', url: '/v1/auth/login', headers: { 'x-tenant': slug }, payload: { email, password } });

beforeAll(async () => {
  db = await createTestDatabase();
  auth = await createTestAuth(db.pool);
  app = await createTestApp(
    auth,
    authenticated(auth, async (v1) => {
      v1.get('/whoami', { config: { permission: 'roles:read' } }, async (request) => request.auth);
    }),
  );
});
afterAll(async () => {
  await app?.close();
  await auth?.close();
  await db?.drop();
});

// Each CLI run starts a process (node, config, migrations check): seconds, more under load.
describe('when an operator provisions with the ops CLI while the service runs', { timeout: 120_000 }, () => {
  const slug = `ops-${randomBytes(4).toString('hex')}`;

  it('tenants create makes a tenant whose admin can log in; a second create fails with exit 1', async () => {
    const created = await ops(
      'tenants',
      'create',
      slug,
      '--plan',
      'starter',
      '--admin-email',
      'boss@ops.test',
      '--admin-password',
      'boss-password',
    );
    expect(created, created.stderr).toMatchObject({ code: 0 });
    expect(created.stdout).toContain(`created tenant ${slug}`);
    expect(created.stdout).toContain('with its admin');
    expect(created.stdout).not.toContain('boss@');
    expect((await login(slug, 'boss@ops.test', 'boss-password')).statusCode).toBe(200);
    const again = await ops('tenants', 'create', slug, '--plan', 'pro', '--admin-email', 'x@ops.test', '--admin-password', 'x-password');
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('already exists');
    expect(
      (await ops('tenants', 'create', 'Not_A_Slug', '--plan', 'pro', '--admin-email', 'x@ops.test', '--admin-password', 'x-password')).code,
    ).toBe(1);
  });

  it('tenants set-plan reaches request.auth of the running service within seconds, without restart', async () => {
    const headers = await authHeaders(auth, { slug }, 'employee');
    const whoami = async () => (await app.inject({ method: 'GET', url: '/v1/whoami', headers })).json<AuthContext>();
    expect((await whoami()).plan).toBe('starter');
    const changed = await ops('tenants', 'set-plan', slug, '--plan', 'enterprise', '--rate-per-minute', '1200', '--rate-burst', '40');
    expect(changed, changed.stderr).toMatchObject({ code: 0 });
    // Within seconds: waitFor fails the test if the new plan is not seen within 5 s.
    const seen = await waitFor(async () => {
      const ctx = await whoami();
      return ctx.plan === 'enterprise' && ctx;
    }, 5_000);
    expect(seen).toMatchObject({ plan: 'enterprise', rateLimitOverride: { perMinute: 1200, burst: 40 } });
    const listed = await ops('tenants', 'list', '--json');
    expect(JSON.parse(listed.stdout)).toContainEqual(
      expect.objectContaining({ slug, plan: 'enterprise', rateLimitOverride: { perMinute: 1200, burst: 40 } }),
    );
  });

  it('users create, set-role and disable take effect at login', async () => {
    const created = await ops('users', 'create', slug, '--email', 'ann@ops.test', '--password', 'ann-password', '--role', 'analyst');
    expect(created, created.stderr).toMatchObject({ code: 0 });
    // What a command on one login prints names it by id: the operator typed the address, and
    // their terminal often ends up in a job's log.
    expect(created.stdout).toMatch(/^user [0-9a-f-]{36}\tanalyst\tactive\n$/);
    const first = await login(slug, 'ann@ops.test', 'ann-password');
    expect(first.statusCode).toBe(200);
    expect(
      JSON.parse(Buffer.from(first.json<{ accessToken: string }>().accessToken.split('.')[1] ?? '', 'base64url').toString()).roles,
    ).toEqual(['analyst']);

    const promoted = await ops('users', 'set-role', slug, '--email', 'ANN@ops.test', '--role', 'hr_manager');
    expect(promoted.code).toBe(0);
    expect(promoted.stdout).toMatch(/^user [0-9a-f-]{36}\thr_manager\tactive\n$/);
    const second = await login(slug, 'ann@ops.test', 'ann-password');
    expect(
      JSON.parse(Buffer.from(second.json<{ accessToken: string }>().accessToken.split('.')[1] ?? '', 'base64url').toString()).roles,
    ).toEqual(['hr_manager']);

    const disabled = await ops('users', 'disable', slug, '--email', 'ann@ops.test');
    expect(disabled.code).toBe(0);
    expect(disabled.stdout).toMatch(/\tdisabled\n$/);
    expect(disabled.stdout).not.toContain('ann@');
    expect((await login(slug, 'ann@ops.test', 'ann-password')).statusCode).toBe(401);
    // Refusals say what is wrong without the address: operators' terminals end up in job logs.
    const unknown = await ops('users', 'disable', slug, '--email', 'nobody@ops.test');
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('No user of this tenant has this email');
    const twice = await ops('users', 'create', slug, '--email', 'ann@ops.test', '--password', 'ann-password', '--role', 'analyst');
    expect(twice.code).toBe(1);
    expect(twice.stderr).toContain('A user of this tenant already has this email');
    expect(unknown.stderr + twice.stderr).not.toMatch(/nobody@|ann@/i);
  });
});

describe('when the service starts with BOOTSTRAP_*', () => {
  it('creates the tenant and admin once; later starts change nothing', async () => {
    const slug = `boot-${randomBytes(4).toString('hex')}`;
    const config = {
      BOOTSTRAP_TENANT: slug,
      BOOTSTRAP_PLAN: 'pro' as const,
      BOOTSTRAP_ADMIN_EMAIL: 'root@boot.test',
      BOOTSTRAP_ADMIN_PASSWORD: 'root-password',
    };
    const starts: Array<{ tenantCreated?: boolean; adminCreated?: boolean }> = [];
    const warnings: string[] = [];
    const logger = {
      info: (context: object) => void starts.push(context),
      warn: (_: object, message: string) => void warnings.push(message),
    };
    // Two gateways starting at once, then a restart with a different password and plan.
    await Promise.all([bootstrapTenant(db.pool, config, logger), bootstrapTenant(db.pool, config, logger)]);
    await bootstrapTenant(db.pool, { ...config, BOOTSTRAP_PLAN: 'starter', BOOTSTRAP_ADMIN_PASSWORD: 'changed-password' }, logger);
    expect(starts).toHaveLength(3);
    expect(starts.filter((s) => s.tenantCreated)).toHaveLength(1);
    expect(starts.filter((s) => s.adminCreated)).toHaveLength(1);
    expect((await findTenantBySlug(db.pool, slug))?.plan).toBe('pro');
    expect((await login(slug, 'root@boot.test', 'root-password')).statusCode).toBe(200);
    expect((await login(slug, 'root@boot.test', 'changed-password')).statusCode).toBe(401);

    // Offboarded, it is final: a start with another admin address gives the tenant no login again.
    const tenant = await findTenantBySlug(db.pool, slug);
    await cutTenantAccess(db.pool, { tenantId: tenant?.id ?? '', offboardedAt: new Date().toISOString() });
    await bootstrapTenant(db.pool, { ...config, BOOTSTRAP_ADMIN_EMAIL: 'again@boot.test' }, logger);
    expect(warnings).toEqual([expect.stringContaining('offboarded')]);
    expect((await login(slug, 'again@boot.test', 'root-password')).statusCode).toBe(401);
  });
});
