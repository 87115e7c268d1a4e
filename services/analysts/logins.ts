import { z } from 'zod';
import { sql, type Queryable } from '../../shared/db/pool.ts';
import { ConflictError } from '../../shared/errors.ts';
import { scramSha256Verifier } from './scramVerifier.ts';

/**
 * Analysts' own PostgreSQL logins: each one a member of the analysts' group role, bound to one
 * tenant in `analyst_logins`, which the read models' analyst policies look up by login name
 * (migrations `db/002`, `analysts/001`, `analysts/002`).
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

export type AnalystLoginLimits = { readonly connectionLimit: number; readonly statementTimeoutSeconds: number };

export async function createAnalystLogin(
  db: Queryable,
  login: { readonly name: string; readonly tenantId: string; readonly password: string } & AnalystLoginLimits,
): Promise<void> {
  if (await db.exists(sql.type(z.object({}))`select from pg_roles where rolname = ${login.name}`)) {
    throw new ConflictError(`a database role ${login.name} already exists (revoke it first, or choose another --login)`);
  }
  await db.query(sql.type(z.object({}))`
    select from analyst_login_create(${login.name}, ${login.tenantId}::uuid, ${scramSha256Verifier(login.password)},
                                     ${login.connectionLimit}::integer, ${`${login.statementTimeoutSeconds}s`})
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

/**
 * Drops an analyst login (nothing for a name that is not one: false) and then ends its open
 * sessions. Those would already see nothing (no tenant, no group role), so ending them is
 * tidiness: `terminated` is null when this role may not signal them (it then needs membership in
 * `pg_signal_backend`), and they end when their clients disconnect.
 */
export async function dropAnalystLogin(db: Queryable, login: string): Promise<{ dropped: boolean; terminated: number | null }> {
  const oid = await db.maybeOneFirst(
    sql.type(z.object({ oid: z.string() }))`select oid::text as oid from pg_roles where rolname = ${login}`,
  );
  const dropped = await db.oneFirst(sql.type(z.object({ dropped: z.boolean() }))`select analyst_login_drop(${login}) as dropped`);
  if (!dropped || oid === null) return { dropped, terminated: 0 };
  // After the drop pg_stat_activity still names the sessions by the role's oid, not its name. The
  // pids are read first and ended one by one: in a single statement the planner may call
  // pg_terminate_backend on rows before the oid filter has removed them.
  const pids = await db.anyFirst(sql.type(z.object({ pid: z.number() }))`select pid from pg_stat_activity where usesysid = ${oid}::oid`);
  let terminated: number | null = 0;
  for (const pid of pids) {
    const ended = await db
      .oneFirst(sql.type(z.object({ ended: z.boolean() }))`select pg_terminate_backend(${pid}::int) as ended`)
      .catch((error: unknown) => {
        if (sqlStateOf(error) === INSUFFICIENT_PRIVILEGE) return null;
        throw error;
      });
    if (ended === null) terminated = null;
    else if (ended && terminated !== null) terminated += 1;
  }
  return { dropped, terminated };
}

const INSUFFICIENT_PRIVILEGE = '42501';
const sqlStateOf = (error: unknown): unknown =>
  error instanceof Error && error.cause && typeof error.cause === 'object' && 'code' in error.cause ? error.cause.code : undefined;
