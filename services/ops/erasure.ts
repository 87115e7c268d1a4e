import { InvalidArgumentError, type Command } from 'commander';
import { withTenant } from '../../shared/db/pool.ts';
import { NotFoundError } from '../../shared/errors.ts';
import { forgetTenantAccounts } from '../auth/forgetAccount.ts';
import { revocableAnalystLogins, revokeAnalystLogin } from '../analysts/logins.ts';
import { erasurePorts } from '../employees/capability.ts';
import { eraseEmployee } from '../employees/erasure.ts';
import { eraseAll, eraseTenantEmployees, erasuresToReapply, type ErasureOutcome } from '../employees/erasureRuns.ts';
import { listErasures, type ErasureEntry } from '../employees/erasureLedger.ts';
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import type { Runtime } from '../runtime.ts';
import { findTenantBySlug } from '../tenants/tenants.ts';
import { employeeIdSchema } from '../employees/schemas.ts';
import { progressBar } from './cliOptions.ts';
import { opsAction, parseSlug, withConfiguredRuntime } from './tenants.ts';

const portsOf = (runtime: Runtime) =>
  erasurePorts({
    store: runtime.eventStore,
    log: runtime.logStore,
    pool: runtime.pool,
    emailHash: runtime.emailHash,
    dataKeys: runtime.dataKeys,
    logInDatabase: runtime.logInDatabase,
  });

async function tenantIdOf(runtime: Runtime, slug: string): Promise<string> {
  const tenant = await findTenantBySlug(runtime.pool, slug);
  if (!tenant) throw new NotFoundError(`no tenant ${slug}`);
  return tenant.id;
}

/** The shared progress bar (cliOptions.ts), started on the first count, when the total is known. */
function employeesBar(label: string) {
  const bar = progressBar(`${label} |{bar}| {percentage}% | {value}/{total} employees | ETA {eta_formatted}`);
  let started = false;
  return {
    update(done: number, total: number) {
      if (!started) bar.start(total, 0);
      started = true;
      bar.setTotal(total);
      bar.update(done);
    },
    stop: () => bar.stop(),
  };
}

const ledgerFile = z.array(z.object({ tenantId: z.uuid(), employeeId: employeeIdSchema, erasedAt: z.iso.datetime() }));

/** A ledger copy as `employees erasures` printed it. */
function parseLedger(text: string): ErasureEntry[] {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new InvalidArgumentError('--ledger is not JSON (expected what `employees erasures` prints)');
  }
  const parsed = ledgerFile.safeParse(json);
  if (!parsed.success) throw new InvalidArgumentError(`--ledger is not a ledger copy: ${parsed.error.issues[0]?.message ?? 'invalid'}`);
  return parsed.data;
}

const summary = (counts: Record<ErasureOutcome, number>) =>
  `${counts.erased} erased, ${counts.already} erased before (done again), ${counts.absent} not in the log`;

/**
 * `employees erase`, `employees reapply-erasures` and `tenants erase`: the erasure the API makes
 * (services/employees/erasure.ts), for one employee, for every erasure recorded (after restoring a
 * backup), and for a whole tenant. Each is idempotent: a run stopped half-way is resumed by running
 * it again.
 */
export function registerErasureCommands(program: Command): void {
  const employees = program.commands.find((c) => c.name() === 'employees');
  const tenants = program.commands.find((c) => c.name() === 'tenants');
  if (!employees || !tenants) throw new Error('register the employees and tenants commands first');

  employees
    .command('erase <tenant> <employeeId>')
    .description('erase a person (right to erasure): destroys their data key, frees their address, forgets their logins')
    .action(
      opsAction(async (tenant: string, employeeId: string) => {
        const slug = parseSlug(tenant);
        const parsed = employeeIdSchema.safeParse(employeeId);
        if (!parsed.success) throw new InvalidArgumentError('an employee id is a ULID (26 characters)');
        const id = parsed.data;
        await withConfiguredRuntime(async (runtime) => {
          const tenantId = await tenantIdOf(runtime, slug);
          const now = new Date().toISOString();
          const result = await eraseEmployee(portsOf(runtime), id, { tenantId, actor: 'ops:employees erase', now });
          process.stdout.write(`${result.fresh ? 'erased' : 'erased before'} ${result.id} at ${result.erasedAt}\n`);
        });
      }),
    );

  employees
    .command('erasures')
    .description('print the erasure ledger as JSON (ids and times, nothing personal): keep a copy outside the database backups')
    .action(
      opsAction(async () => {
        await withConfiguredRuntime(async (runtime) => {
          process.stdout.write(`${JSON.stringify(await listErasures(runtime.pool), null, 2)}\n`);
        });
      }),
    );

  employees
    .command('reapply-erasures')
    .description('after restoring a backup: erase again everyone the erasure ledger (here and in --ledger) or the log records as erased')
    .option('--tenant <slug>', 'only this tenant', parseSlug)
    .option('--ledger <file>', 'a copy of the ledger from `employees erasures`, newer than the backup')
    .action(
      opsAction(async (options: { tenant?: string; ledger?: string }) => {
        const kept = options.ledger === undefined ? [] : parseLedger(await readFile(options.ledger, 'utf8'));
        await withConfiguredRuntime(async (runtime) => {
          const tenantId = options.tenant === undefined ? undefined : await tenantIdOf(runtime, options.tenant);
          const ports = portsOf(runtime);
          const entries = await erasuresToReapply(ports, tenantId, kept);
          const bar = employeesBar('reapply-erasures');
          const counts = await eraseAll(ports, entries, 'ops:employees reapply-erasures', bar.update).finally(bar.stop);
          process.stdout.write(`${entries.length} erasures re-applied: ${summary(counts)}\n`);
        });
      }),
    );

  tenants
    .command('erase <slug>')
    .description("offboard a tenant: erase every employee, take every login's address away and disable it, revoke its analysts' logins")
    .action(
      opsAction(async (slug: string) => {
        const valid = parseSlug(slug);
        await withConfiguredRuntime(async (runtime) => {
          const tenantId = await tenantIdOf(runtime, valid);
          // Logins first: disabled, their refresh tokens revoked, nobody can sign in or renew a
          // session to hire while the tenant is erased (an access token already issued lives out its
          // minutes: run the command again after them; it skips whoever it finished).
          const logins = await withTenant(runtime.pool, tenantId, (tx) => forgetTenantAccounts(tx, tenantId));
          // The tenant's analysts' database logins read its read models directly: they go too.
          const analysts = await revocableAnalystLogins(runtime.pool, tenantId);
          const unfinished: string[] = [];
          for (const login of analysts) if ((await revokeAnalystLogin(runtime.pool, login)).dropFailure) unfinished.push(login);
          const ports = { ...portsOf(runtime), isDestroyed: (t: string, id: string) => runtime.dataKeys.isDestroyed(t, id) };
          const bar = employeesBar(`erase ${valid}`);
          const counts = await eraseTenantEmployees(ports, tenantId, 'ops:tenants erase', bar.update).finally(bar.stop);
          process.stdout.write(
            `tenant ${valid}: ${counts.employees} employees, ${summary(counts)}, ${counts.skipped} finished before (skipped); ` +
              `${logins} logins forgotten and disabled; ${analysts.length} analysts' database logins revoked\n`,
          );
          if (unfinished.length > 0) {
            process.stdout.write(`cut off but not yet dropped (run \`ops analysts revoke ${valid}\` again): ${unfinished.join(', ')}\n`);
            process.exitCode = 1;
          }
        });
      }),
    );
}
