import { randomBytes } from 'node:crypto';
import { text } from 'node:stream/consumers';
import { InvalidArgumentError, type Command } from 'commander';
import { NotFoundError } from '../../shared/errors.ts';
import { offboardedError, unlessOffboarded } from '../tenants/offboardingLedger.ts';
import { listTenants } from '../tenants/tenants.ts';
import {
  analystLoginNameSchema,
  createAnalystLogin,
  defaultAnalystLogin,
  listAnalystLogins,
  revocableAnalystLogins,
  revokeAnalystLogin,
  type AnalystLogin,
} from '../analysts/logins.ts';
import { opsAction, parseSlug, tenantIdBySlug, withConfiguredRuntime, withConfiguredDatabase } from './tenants.ts';

const MIN_PASSWORD_LENGTH = 16;

const integerIn = (min: number, max: number) => (value: string) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max) throw new InvalidArgumentError(`must be an integer from ${min} to ${max}`);
  return n;
};

const parseLogin = (value: string) => {
  if (!analystLoginNameSchema.safeParse(value).success)
    throw new InvalidArgumentError('a login is 1-63 lowercase letters, digits or underscores, not starting with a digit');
  return value;
};

/** A password given on stdin: one line of printable ASCII (what SCRAM's SASLprep leaves as it is). */
async function passwordFromStdin(): Promise<string> {
  const password = (await text(process.stdin)).replace(/\r?\n$/, '');
  if (!/^[\x20-\x7e]*$/.test(password)) throw new InvalidArgumentError('the password is one line of printable ASCII characters');
  if (password.length < MIN_PASSWORD_LENGTH) throw new InvalidArgumentError(`the password has at least ${MIN_PASSWORD_LENGTH} characters`);
  return password;
}

/** The service's own connection string with the login's name (and password, when generated here) instead of the owner's. */
export function connectionString(databaseUrl: string, login: string, password: string | undefined): string {
  const url = new URL(databaseUrl);
  url.username = login;
  url.password = password ?? '';
  return url.toString();
}

export function registerAnalystCommands(program: Command): void {
  const analysts = program
    .command('analysts')
    .description("analysts' own read-only database logins (BI tools, notebooks), each bound to one tenant");

  analysts
    .command('grant <tenant>')
    .description("create a read-only login that reads the tenant's rows of the read models; prints its connection string")
    .option('--login <name>', 'login name (default: analyst_<tenant slug>)', parseLogin)
    .option(
      '--password-stdin',
      `read the password from stdin (at least ${MIN_PASSWORD_LENGTH} printable ASCII characters) instead of generating one`,
    )
    .option('--connection-limit <n>', 'at most this many sessions at once', integerIn(1, 100), 5)
    .option('--statement-timeout <seconds>', 'default statement (and idle-in-transaction) timeout', integerIn(1, 3600), 30)
    .option('--idle-session-timeout <seconds>', 'default timeout of a session idle outside a transaction', integerIn(60, 86_400), 600)
    .action(
      opsAction(
        async (
          tenant: string,
          options: {
            login?: string;
            passwordStdin?: boolean;
            connectionLimit: number;
            statementTimeout: number;
            idleSessionTimeout: number;
          },
        ) => {
          const slug = parseSlug(tenant);
          const login = options.login ?? defaultAnalystLogin(slug);
          if (!analystLoginNameSchema.safeParse(login).success)
            throw new InvalidArgumentError(`${login} is too long for a login: give --login`);
          const given = options.passwordStdin ? await passwordFromStdin() : undefined;
          const password = given ?? randomBytes(24).toString('base64url');
          await withConfiguredRuntime(async ({ pool, databaseUrl }) => {
            const tenantId = await tenantIdBySlug(pool, slug);
            const made = await unlessOffboarded(pool, tenantId, (tx) =>
              createAnalystLogin(tx, {
                name: login,
                tenantId,
                password,
                connectionLimit: options.connectionLimit,
                statementTimeoutSeconds: options.statementTimeout,
                idleSessionTimeoutSeconds: options.idleSessionTimeout,
              }),
            );
            if (made.offboarded) throw offboardedError(slug);
            process.stdout.write(
              `created analyst login ${login} for tenant ${slug} (${tenantId}): read-only, ` +
                `${options.statementTimeout} s statement timeout, at most ${options.connectionLimit} connections\n` +
                `${connectionString(databaseUrl, login, given === undefined ? password : undefined)}\n` +
                (given === undefined ? 'the password is shown only this once\n' : ''),
            );
          });
        },
      ),
    );

  analysts
    .command('revoke <tenant>')
    .description("drop the tenant's analyst logins (or only --login) and end their sessions")
    .option('--login <name>', 'only this login', parseLogin)
    .action(
      opsAction(async (tenant: string, options: { login?: string }) => {
        const slug = parseSlug(tenant);
        await withConfiguredDatabase(async (pool) => {
          const tenantId = await tenantIdBySlug(pool, slug);
          const logins = (await revocableAnalystLogins(pool, tenantId)).filter((l) => options.login === undefined || l === options.login);
          if (logins.length === 0)
            throw new NotFoundError(`no analyst login${options.login ? ` ${options.login}` : ''} for tenant ${slug}`);
          let unfinished = 0;
          for (const login of logins) {
            const { terminated, dropFailure } = await revokeAnalystLogin(pool, login);
            const sessions =
              terminated === null ? 'open sessions end when they disconnect (no right to end them)' : `${terminated} open sessions ended`;
            if (dropFailure === undefined) {
              process.stdout.write(`dropped analyst login ${login} of tenant ${slug}; ${sessions}\n`);
            } else {
              unfinished += 1;
              process.stdout.write(
                `cut the access of analyst login ${login} of tenant ${slug}; ${sessions}; ` +
                  `its role is not dropped yet (${dropFailure}): run revoke again\n`,
              );
            }
          }
          if (unfinished > 0) process.exitCode = 1;
        });
      }),
    );

  analysts
    .command('list [tenant]')
    .description('list analyst logins: login, tenant, connection limit, created')
    .action(
      opsAction(async (tenant: string | undefined) => {
        const slug = tenant === undefined ? undefined : parseSlug(tenant);
        await withConfiguredDatabase(async (pool) => {
          const slugs = new Map((await listTenants(pool)).map((t) => [t.id, t.slug]));
          const logins = await listAnalystLogins(pool, slug === undefined ? undefined : await tenantIdBySlug(pool, slug));
          const describe = (l: AnalystLogin) => `${l.login}\t${slugs.get(l.tenantId) ?? l.tenantId}\t${l.connectionLimit}\t${l.createdAt}`;
          process.stdout.write(['login\ttenant\tconnections\tcreated', ...logins.map(describe)].join('\n') + '\n');
        });
      }),
    );
}
