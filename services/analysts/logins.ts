import { z } from 'zod';
import { ignoredRows, sql, type Queryable } from '../../shared/db/pool.ts';
import { ConflictError } from '../../shared/errors.ts';
import { scramSha256Verifier } from './scramVerifier.ts';

/**
 * Analysts' own PostgreSQL logins: each one a member of the analysts' group role, bound to one
 * tenant in `analyst_logins`, which the read models' analyst policies look up by login name
 * (migrations `db/002` and `analysts/`).
 */
export type AnalystLogin = {
  readonly login: string;
  readonly tenantId: string;
  readonly createdAt: string;
  readonly connectionLimit: number;
};

/** A PostgreSQL identifier that needs no quoting anywhere (BI tools' connection forms included). */
export const analystLoginNameSchema = z.string().regex(/^[a-z_][a-z0-9_]{0,62}$/);

/** The default login name of a tenant's analysts: `analyst_<slug>`, its hyphens as underscores. */
export const defaultAnalystLogin = (slug: string) => `analyst_${slug.replaceAll('-', '_')}`;

export type AnalystLoginLimits = {
  readonly connectionLimit: number;
  readonly statementTimeoutSeconds: number;
  readonly idleSessionTimeoutSeconds: number;
};

export async function createAnalystLogin(
  db: Queryable,
  login: { readonly name: string; readonly tenantId: string; readonly password: string } & AnalystLoginLimits,
): Promise<void> {
  if (await db.exists(sql.type(ignoredRows)`select from pg_roles where rolname = ${login.name}`)) {
    throw new ConflictError(`a database role ${login.name} already exists (revoke it first, or choose another --login)`);
  }
  await db.query(sql.type(ignoredRows)`
    select from analyst_login_create(${login.name}, ${login.tenantId}::uuid, ${scramSha256Verifier(login.password)},
                                     ${login.connectionLimit}::integer, ${`${login.statementTimeoutSeconds}s`},
                                     ${`${login.idleSessionTimeoutSeconds}s`})
  `);
}

const loginRow = z.object({ login: z.string(), tenantId: z.string(), createdAt: z.string(), connectionLimit: z.number() });

/** The analysts' logins, of one tenant or of all, by name. */
export async function listAnalystLogins(db: Queryable, tenantId?: string): Promise<readonly AnalystLogin[]> {
  return db.any(sql.type(loginRow)`
    select l.role_name as "login", l.tenant_id as "tenantId", l.created_at::text as "createdAt", coalesce(r.rolconnlimit, 0) as "connectionLimit"
    from analyst_logins l left join pg_roles r on r.rolname = l.role_name
    where ${tenantId === undefined ? sql.fragment`true` : sql.fragment`l.tenant_id = ${tenantId}::uuid`}
    order by l.role_name
  `);
}

const loginNameRow = z.object({ login: z.string() });

/** The names `revoke` acts on for a tenant: its bound logins, and those a failed revoke left without access but not dropped. */
export async function revocableAnalystLogins(db: Queryable, tenantId: string): Promise<readonly string[]> {
  return db.anyFirst(sql.type(loginNameRow)`
    select role_name as "login" from analyst_logins where tenant_id = ${tenantId}::uuid
    union
    select role_name from analyst_logins_revoked where tenant_id = ${tenantId}::uuid
    order by 1
  `);
}

export type AnalystLoginRevocation = {
  /** False, and nothing done, for a name that is not an analyst login. */
  readonly revoked: boolean;
  /** Sessions ended; null when this role may not signal them (it then needs `pg_signal_backend`). */
  readonly terminated: number | null;
  /** Why the role could not be dropped after its access was cut (a later revoke finishes it). */
  readonly dropFailure?: string;
};

const revokedRow = z.object({ revoked: z.boolean() });
const pidRow = z.object({ pid: z.number() });
const endedRow = z.object({ ended: z.boolean() });

/**
 * Revokes an analyst login in three steps, each committed on its own, so that whatever the login
 * left behind cannot undo the first: its access is cut (no login, no group role, no tenant
 * binding), then its sessions are ended (each waited for, so their temporary tables are gone),
 * then what it owns here (large objects) is dropped with the role. A failing last step leaves a
 * login without access, which is reported and finished by the next revoke.
 */
export async function revokeAnalystLogin(db: Queryable, login: string): Promise<AnalystLoginRevocation> {
  const revoked = await db.oneFirst(sql.type(revokedRow)`select analyst_login_revoke_access(${login}) as revoked`);
  if (!revoked) return { revoked, terminated: 0 };
  // The pids are read first and ended one by one: in a single statement the planner may call
  // pg_terminate_backend on rows before the role filter has removed them.
  const pids = await db.anyFirst(sql.type(pidRow)`select pid from pg_stat_activity where usename = ${login}`);
  let terminated: number | null = 0;
  for (const pid of pids) {
    const ended = await db
      .oneFirst(sql.type(endedRow)`select pg_terminate_backend(${pid}::int, ${SESSION_END_WAIT_MS}::bigint) as ended`)
      .catch((error: unknown) => {
        if (sqlStateOf(error) === INSUFFICIENT_PRIVILEGE) return null;
        throw error;
      });
    if (ended === null) terminated = null;
    else if (ended && terminated !== null) terminated += 1;
  }
  try {
    await db.query(sql.type(ignoredRows)`select analyst_login_drop(${login})`);
    return { revoked, terminated };
  } catch (error) {
    return { revoked, terminated, dropFailure: messageOf(error) };
  }
}

/** How long ending one session may take (PostgreSQL waits for the backend to exit, then reports false). */
const SESSION_END_WAIT_MS = 5_000;

const messageOf = (error: unknown): string =>
  error instanceof Error && error.cause instanceof Error ? error.cause.message : error instanceof Error ? error.message : String(error);
const INSUFFICIENT_PRIVILEGE = '42501';
const sqlStateOf = (error: unknown): unknown =>
  error instanceof Error && error.cause && typeof error.cause === 'object' && 'code' in error.cause ? error.cause.code : undefined;
