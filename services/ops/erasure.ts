import { readFile } from 'node:fs/promises';
import { InvalidArgumentError, type Command } from 'commander';
import { erasurePorts } from '../employees/capability.ts';
import { eraseEmployee } from '../employees/erasure.ts';
import { eraseAll, eraseTenantEmployees, erasuresToReapply, type ErasureOutcome } from '../employees/erasureRuns.ts';
import type { Runtime } from '../runtime.ts';
import { cutTenantAccess, type AccessCut } from '../tenants/offboarding.ts';
import { offboardingsToReapply } from '../tenants/offboardingLedger.ts';
import { employeeIdSchema } from '../employees/schemas.ts';
import { progressBar } from './cliOptions.ts';
import { parseLedgerCopy, readLedgers, type LedgerCopy } from './ledgerFile.ts';
import { opsAction, parseSlug, tenantIdBySlug, withConfiguredRuntime } from './tenants.ts';

const portsOf = (runtime: Runtime) =>
  erasurePorts({
    store: runtime.eventStore,
    log: runtime.logStore,
    pool: runtime.pool,
    emailHash: runtime.emailHash,
    dataKeys: runtime.dataKeys,
    logInDatabase: runtime.logInDatabase,
  });

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

const summary = (counts: Record<ErasureOutcome, number>) =>
  `${counts.erased} erased, ${counts.already} erased before (done again), ${counts.absent} not in the log`;

const accessSummary = (cut: Omit<AccessCut, 'unfinished'>) =>
  `${cut.logins} logins forgotten and disabled; ${cut.analysts} analysts' database logins revoked`;

/** Analysts' logins cut off but not dropped: named, and the command exits 1. */
function reportUnfinished(unfinished: readonly string[], hint: string): void {
  if (unfinished.length === 0) return;
  process.stdout.write(`cut off but not yet dropped (${hint}): ${unfinished.join(', ')}\n`);
  process.exitCode = 1;
}

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
          const tenantId = await tenantIdBySlug(runtime.pool, slug);
          const now = new Date().toISOString();
          const result = await eraseEmployee(portsOf(runtime), id, { tenantId, actor: 'ops:employees erase', now });
          process.stdout.write(`${result.fresh ? 'erased' : 'erased before'} ${result.id} at ${result.erasedAt}\n`);
        });
      }),
    );

  employees
    .command('erasures')
    .description(
      'print the erasure ledgers (employees erased, tenants offboarded) as JSON, ids and times only: keep a copy outside the database backups',
    )
    .action(
      opsAction(async () => {
        await withConfiguredRuntime(async (runtime) => {
          process.stdout.write(`${JSON.stringify(await readLedgers(runtime.pool), null, 2)}\n`);
        });
      }),
    );

  employees
    .command('reapply-erasures')
    .description(
      'after restoring a backup: offboard again every tenant and erase again everyone the ledgers (here and in --ledger) or the log record',
    )
    .option('--tenant <slug>', 'only this tenant', parseSlug)
    .option('--ledger <file>', 'a copy of the ledgers from `employees erasures`, newer than the backup')
    .action(
      opsAction(async (options: { tenant?: string; ledger?: string }) => {
        const kept: LedgerCopy =
          options.ledger === undefined ? { employees: [], tenants: [] } : parseLedgerCopy(await readFile(options.ledger, 'utf8'));
        await withConfiguredRuntime(async (runtime) => {
          const tenantId = options.tenant === undefined ? undefined : await tenantIdBySlug(runtime.pool, options.tenant);
          // Tenants first, as `tenants erase` does: their logins are cut before their people are erased.
          const offboardings = await offboardingsToReapply(runtime.pool, tenantId, kept.tenants);
          const cuts: AccessCut[] = [];
          for (const offboarding of offboardings) cuts.push(await cutTenantAccess(runtime.pool, offboarding));
          const cut = {
            logins: cuts.reduce((n, c) => n + c.logins, 0),
            analysts: cuts.reduce((n, c) => n + c.analysts, 0),
            unfinished: cuts.flatMap((c) => c.unfinished),
          };
          const ports = portsOf(runtime);
          const offboarded = new Set(offboardings.map((o) => o.tenantId));
          const entries = await erasuresToReapply(ports, tenantId, kept.employees, offboarded);
          const bar = employeesBar('reapply-erasures');
          const counts = await eraseAll(ports, entries, 'ops:employees reapply-erasures', bar.update).finally(bar.stop);
          process.stdout.write(
            `${entries.length} erasures re-applied: ${summary(counts)}\n` +
              `${offboardings.length} tenant offboardings re-applied: ${accessSummary(cut)}\n`,
          );
          reportUnfinished(cut.unfinished, 'run `ops analysts revoke <tenant>` again');
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
          const tenantId = await tenantIdBySlug(runtime.pool, valid);
          // Logins first: disabled, their refresh tokens revoked, nobody can sign in or renew a
          // session to hire while the tenant is erased (an access token already issued lives out its
          // minutes: run the command again after them; it skips whoever it finished). The
          // tenant's analysts' database logins read its read models directly: they go too.
          const cut = await cutTenantAccess(runtime.pool, { tenantId, offboardedAt: new Date().toISOString() });
          const ports = { ...portsOf(runtime), isDestroyed: (t: string, id: string) => runtime.dataKeys.isDestroyed(t, id) };
          const bar = employeesBar(`erase ${valid}`);
          const counts = await eraseTenantEmployees(ports, tenantId, 'ops:tenants erase', bar.update).finally(bar.stop);
          process.stdout.write(
            `tenant ${valid}: ${counts.employees} employees, ${summary(counts)}, ${counts.skipped} finished before (skipped); ` +
              `${accessSummary(cut)}\n`,
          );
          reportUnfinished(cut.unfinished, `run \`ops analysts revoke ${valid}\` again`);
        });
      }),
    );
}
