import { InvalidArgumentError, Option, type Command } from 'commander';
import pino from 'pino';
import { loadConfig } from '../../shared/config.ts';
import { createLogger } from '../../shared/logger.ts';
import { errorForLog } from '../../shared/logSerializers.ts';
import type { DatabasePool } from '../../shared/db/pool.ts';
import { AppError, ConflictError, NotFoundError } from '../../shared/errors.ts';
import { createRuntime, type Runtime } from '../runtime.ts';
import { provisionTenant } from '../tenants/provision.ts';
import { findTenantBySlug, listTenants, PLANS, tenantSlugSchema, updateTenantPlan, type Tenant } from '../tenants/tenants.ts';
import { TENANT_CACHE_TTL_MS } from '../tenants/directory.ts';
import type { Plan, RateLimitOverride } from '../gateway/requestContext.ts';
import { MAX_OVERRIDE } from '../../shared/rate-limit/policy.ts';

/**
 * Runs `work` against the configured database (DATABASE_URL, or the embedded server under
 * DATA_DIR: attached to if the service runs, started otherwise). Logs go to stderr so stdout
 * stays the command's output.
 */
export async function withConfiguredRuntime(work: (runtime: Runtime) => Promise<void>): Promise<void> {
  const config = loadConfig();
  const logger = createLogger({ LOG_LEVEL: 'warn', LOG_FORMAT: 'json' }, 'eas-ops', pino.destination(2));
  const runtime = await createRuntime(config, logger);
  try {
    await work(runtime);
  } finally {
    await runtime.close();
  }
}

/** `withConfiguredRuntime` for commands that need only the database. */
export const withConfiguredDatabase = (work: (pool: DatabasePool) => Promise<void>): Promise<void> =>
  withConfiguredRuntime((runtime) => work(runtime.pool));

/**
 * Prints a failure nobody planned for as the service's logs carry it: Node's own report of an
 * uncaught error prints every field, and a database error's detail or bound values can quote an
 * address. As JSON, which leaves out what the serializer keeps under symbols (the raw error); the
 * replacer only keeps a bigint or a cycle from failing the print.
 */
export function printUnexpected(error: unknown): void {
  const seen = new WeakSet<object>();
  const printable = (_key: string, value: unknown): unknown => {
    if (typeof value === 'bigint') return `${value}n`;
    if (typeof value !== 'object' || value === null) return value;
    if (seen.has(value)) return '[seen above]';
    seen.add(value);
    return value;
  };
  process.stderr.write(`unexpected error: ${JSON.stringify(errorForLog(error), printable, 2)}\n`);
}

/**
 * Wraps a command action: operator mistakes print one line, anything else prints as
 * `printUnexpected` does; both exit 1.
 */
export const opsAction =
  <A extends unknown[]>(action: (...args: A) => Promise<void>) =>
  async (...args: A): Promise<void> => {
    try {
      await action(...args);
    } catch (error) {
      if (error instanceof AppError || error instanceof InvalidArgumentError) process.stderr.write(`error: ${error.message}\n`);
      else printUnexpected(error);
      // The runtime is closed by now (withConfiguredRuntime's finally). `exitCode` is kept: the
      // embedded server leaves the exit code to the process (shared/db/embedded.ts).
      process.exitCode = 1;
    }
  };

export const parseSlug = (value: string) => {
  const parsed = tenantSlugSchema.safeParse(value);
  if (!parsed.success) throw new InvalidArgumentError('a tenant slug is 1-63 lowercase letters, digits or inner hyphens');
  return parsed.data;
};

/** The id of the tenant `slug` names; a one-line "no tenant" error when none does. */
export async function tenantIdBySlug(pool: DatabasePool, slug: string): Promise<string> {
  const tenant = await findTenantBySlug(pool, slug);
  if (!tenant) throw new NotFoundError(`no tenant ${slug}`);
  return tenant.id;
}

/** A rate override value: what the limiter takes as it is (it would clamp larger ones without a word). */
const overrideValue = (value: string) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0 || n > MAX_OVERRIDE) {
    throw new InvalidArgumentError(`must be a positive integer, at most ${MAX_OVERRIDE.toLocaleString('en')}`);
  }
  return n;
};

const planOption = () => new Option('--plan <plan>', 'starter | pro | enterprise').choices(PLANS);
const overrideOptions = (command: Command) =>
  command
    .option('--rate-per-minute <n>', 'per-tenant rate override: requests per minute', overrideValue)
    .option('--rate-burst <n>', 'per-tenant rate override: burst (bucket capacity)', overrideValue);

function overrideFrom(options: { ratePerMinute?: number; rateBurst?: number }): RateLimitOverride | undefined {
  if (options.ratePerMinute === undefined && options.rateBurst === undefined) return undefined;
  if (options.ratePerMinute === undefined || options.rateBurst === undefined) {
    throw new InvalidArgumentError('--rate-per-minute and --rate-burst go together');
  }
  return { perMinute: options.ratePerMinute, burst: options.rateBurst };
}

const describeTenant = (t: Tenant) =>
  `${t.slug}\t${t.plan}\t${t.rateLimitOverride ? `${t.rateLimitOverride.perMinute}/min burst ${t.rateLimitOverride.burst}` : '-'}\t${t.name}\t${t.id}`;

export function registerTenantCommands(program: Command): void {
  const tenants = program.command('tenants').description('provision tenants and change their plans');

  overrideOptions(
    tenants
      .command('create <slug>')
      .description('create a tenant with its built-in roles and first admin')
      .addOption(planOption().makeOptionMandatory())
      .requiredOption('--admin-email <email>', "the first admin's e-mail")
      .requiredOption('--admin-password <password>', "the first admin's password (at least 8 characters)")
      .option('--name <name>', 'display name (default: the slug)'),
  ).action(
    opsAction(
      async (
        slug: string,
        options: { plan: Plan; adminEmail: string; adminPassword: string; name?: string; ratePerMinute?: number; rateBurst?: number },
      ) => {
        const validSlug = parseSlug(slug);
        if (options.adminPassword.length < 8) throw new InvalidArgumentError('--admin-password must have at least 8 characters');
        const override = overrideFrom(options);
        await withConfiguredDatabase(async (pool) => {
          if (await findTenantBySlug(pool, validSlug)) {
            throw new ConflictError(`tenant ${validSlug} already exists (see tenants list, tenants set-plan, users create)`);
          }
          const result = await provisionTenant(pool, {
            slug: validSlug,
            plan: options.plan,
            rateLimitOverride: override ?? null,
            admin: { email: options.adminEmail, password: options.adminPassword },
            ...(options.name ? { name: options.name } : {}),
          });
          process.stdout.write(
            `created tenant ${result.tenant.slug} (${result.tenant.id}), plan ${result.tenant.plan}, ${result.adminCreated ? 'with' : 'without'} its admin\n`,
          );
        });
      },
    ),
  );

  tenants
    .command('list')
    .description('list tenants: slug, plan, rate override, name, id')
    .option('--json', 'print JSON')
    .action(
      opsAction(async (options: { json?: boolean }) => {
        await withConfiguredDatabase(async (pool) => {
          const all = await listTenants(pool);
          if (options.json) process.stdout.write(`${JSON.stringify(all, null, 2)}\n`);
          else process.stdout.write(['slug\tplan\toverride\tname\tid', ...all.map(describeTenant)].join('\n') + '\n');
        });
      }),
    );

  overrideOptions(
    tenants
      .command('set-plan <slug>')
      .description(`change plan and/or rate override; running gateways apply it within ${TENANT_CACHE_TTL_MS / 1000} s, no restart`)
      .addOption(planOption())
      .option('--clear-override', 'remove the per-tenant rate override'),
  ).action(
    opsAction(async (slug: string, options: { plan?: Plan; clearOverride?: boolean; ratePerMinute?: number; rateBurst?: number }) => {
      const validSlug = parseSlug(slug);
      const override = overrideFrom(options);
      if (override && options.clearOverride) throw new InvalidArgumentError('--clear-override contradicts --rate-per-minute/--rate-burst');
      if (!options.plan && !override && !options.clearOverride)
        throw new InvalidArgumentError('nothing to change: give --plan, a rate override or --clear-override');
      await withConfiguredDatabase(async (pool) => {
        const updated = await updateTenantPlan(pool, validSlug, {
          ...(options.plan ? { plan: options.plan } : {}),
          ...(override ? { rateLimitOverride: override } : options.clearOverride ? { rateLimitOverride: null } : {}),
        });
        if (!updated) throw new NotFoundError(`no tenant ${validSlug}`);
        process.stdout.write(`${describeTenant(updated)}\n`);
      });
    }),
  );
}
