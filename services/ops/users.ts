import { InvalidArgumentError, Option, type Command } from 'commander';
import { withTenant } from '../../shared/db/pool.ts';
import { BUILT_IN_ROLES } from '../auth/permissions.ts';
import { MIN_PASSWORD_LENGTH } from '../auth/passwords.ts';
import { createUser, disableUser, listUsers, setUserRole, type User } from '../auth/users.ts';
import { offboardedError, unlessOffboarded } from '../tenants/offboardingLedger.ts';
import type { DatabasePool } from '../../shared/db/pool.ts';
import type { DatabaseTransactionConnection } from '../../shared/db/pool.ts';
import { opsAction, parseSlug, tenantIdBySlug, withConfiguredDatabase } from './tenants.ts';

const roleOption = () => new Option('--role <role>', BUILT_IN_ROLES.join(' | ')).choices(BUILT_IN_ROLES);

const stateOf = (u: User) => (u.disabled ? 'disabled' : u.hasPassword ? 'active' : 'no password');
const describeUser = (u: User) => `${u.email}\t${u.role}\t${stateOf(u)}\t${u.id}`;
// What a command on one login prints: the operator named the address, so it is left out (their
// terminal often ends up in a job's log, which holds no address). `users list` shows them on purpose.
const describeChanged = (u: User) => `user ${u.id}\t${u.role}\t${stateOf(u)}`;

async function inTenant<T>(
  pool: DatabasePool,
  slug: string,
  work: (tx: DatabaseTransactionConnection, tenantId: string) => Promise<T>,
): Promise<T> {
  const tenantId = await tenantIdBySlug(pool, slug);
  return withTenant(pool, tenantId, (tx) => work(tx, tenantId));
}

export function registerUserCommands(program: Command): void {
  const users = program.command('users').description("manage a tenant's logins and their roles");

  users
    .command('create <tenant>')
    .description('create a login (or give a password to an account made from an employee roleId)')
    .requiredOption('--email <email>')
    .requiredOption('--password <password>', `at least ${MIN_PASSWORD_LENGTH} characters`)
    .addOption(roleOption().makeOptionMandatory())
    .action(
      opsAction(async (tenant: string, options: { email: string; password: string; role: string }) => {
        const slug = parseSlug(tenant);
        if (options.password.length < MIN_PASSWORD_LENGTH)
          throw new InvalidArgumentError(`--password must have at least ${MIN_PASSWORD_LENGTH} characters`);
        await withConfiguredDatabase(async (pool) => {
          const tenantId = await tenantIdBySlug(pool, slug);
          const made = await unlessOffboarded(pool, tenantId, (tx) => createUser(tx, { ...options, tenantId }));
          if (made.offboarded) throw offboardedError(slug);
          const user = made.value;
          process.stdout.write(`${describeChanged(user)}\n`);
        });
      }),
    );

  users
    .command('set-role <tenant>')
    .description("change a user's role (effective at their next token refresh, at most 15 minutes)")
    .requiredOption('--email <email>')
    .addOption(roleOption().makeOptionMandatory())
    .action(
      opsAction(async (tenant: string, options: { email: string; role: string }) => {
        const slug = parseSlug(tenant);
        await withConfiguredDatabase(async (pool) => {
          const user = await inTenant(pool, slug, (tx, tenantId) => setUserRole(tx, tenantId, options.email, options.role));
          process.stdout.write(`${describeChanged(user)}\n`);
        });
      }),
    );

  users
    .command('disable <tenant>')
    .description('disable a login and revoke its refresh tokens (access tokens expire within 15 minutes)')
    .requiredOption('--email <email>')
    .action(
      opsAction(async (tenant: string, options: { email: string }) => {
        const slug = parseSlug(tenant);
        await withConfiguredDatabase(async (pool) => {
          const user = await inTenant(pool, slug, (tx, tenantId) => disableUser(tx, tenantId, options.email));
          process.stdout.write(`${describeChanged(user)}\n`);
        });
      }),
    );

  users
    .command('list <tenant>')
    .description("list a tenant's users: email, role, state, id")
    .action(
      opsAction(async (tenant: string) => {
        const slug = parseSlug(tenant);
        await withConfiguredDatabase(async (pool) => {
          const all = await inTenant(pool, slug, (tx, tenantId) => listUsers(tx, tenantId));
          process.stdout.write(['email\trole\tstate\tid', ...all.map(describeUser)].join('\n') + '\n');
        });
      }),
    );
}
