import type { Command } from 'commander';
import { z } from 'zod';
import { sql } from '../../shared/db/pool.ts';
import { NotFoundError } from '../../shared/errors.ts';
import { auditReservation, RESERVATION_AUDITS, UNSETTLED_AUDITS, type ReservationAudit } from '../employees/emailReservation.ts';
import { findTenantBySlug } from '../tenants/tenants.ts';
import { opsAction, parseSlug, withConfiguredRuntime } from './tenants.ts';

const employeeRow = z.object({ tenant_id: z.string(), id: z.string() });

/**
 * `ops employees check-emails [--tenant <slug>] [--repair]`: every hired employee's address must
 * be reserved by that employee (services/employees/emailReservation.ts). A reservation written
 * apart from the employee's own append can leave an address free while its employee still has
 * it, and a hire could then take it. This finds such addresses, reserves them
 * for their employee with `--repair`, and names any address two employees already share
 * (`shared`: change one of them by hand). Employees come from the employees read model (one
 * hired a moment ago and not yet projected is not looked at; hires reserve atomically anyway);
 * each one's address from its stream. Exit code 1 when something is left to do.
 */
export function registerEmployeeCommands(program: Command): void {
  const employees = program.command('employees').description('employee data maintenance');
  employees
    .command('check-emails')
    .description("check that every employee's email address is reserved for it (email uniqueness); --repair reserves the missing ones")
    .option('--tenant <slug>', 'only this tenant', parseSlug)
    .option('--repair', 'reserve the addresses found missing')
    .action(
      opsAction(async (options: { tenant?: string; repair?: boolean }) => {
        let left = 0;
        await withConfiguredRuntime(async ({ pool, eventStore, emailHash }) => {
          const tenant = options.tenant === undefined ? undefined : await findTenantBySlug(pool, options.tenant);
          if (options.tenant !== undefined && !tenant) throw new NotFoundError(`No tenant ${options.tenant}`);
          const rows = await pool.any(sql.type(employeeRow)`
            select tenant_id::text, id::text from employees
            ${tenant ? sql.fragment`where tenant_id = ${tenant.id}` : sql.fragment``}
            order by tenant_id, id
          `);
          const counts = new Map<ReservationAudit, number>();
          const now = new Date().toISOString();
          for (const row of rows) {
            const metadata = { tenantId: row.tenant_id, actor: 'ops:employees check-emails', occurredAt: now };
            const { outcome, email } = await auditReservation(
              eventStore,
              { emailHash, tenantId: row.tenant_id, employeeId: row.id, now, metadata },
              { repair: options.repair === true },
            );
            counts.set(outcome, (counts.get(outcome) ?? 0) + 1);
            if (outcome !== 'ok' && outcome !== 'gone') process.stdout.write(`${outcome}\t${row.tenant_id}\t${row.id}\t${email ?? ''}\n`);
          }
          left = [...UNSETTLED_AUDITS].reduce((n, k) => n + (counts.get(k) ?? 0), 0);
          const summary = RESERVATION_AUDITS.map((k) => `${k} ${counts.get(k) ?? 0}`).join(', ');
          process.stdout.write(`${rows.length} employees: ${summary}\n`);
        });
        if (left > 0) process.exitCode = 1;
      }),
    );
}
