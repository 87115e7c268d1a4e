import type { FragmentSqlToken, IdentifierSqlToken } from 'slonik';
import { sql, TENANT_ROLE } from './pool.ts';

/**
 * DDL that makes `table` tenant-scoped: row-level security, forced (so even the owner is
 * filtered unless it is a superuser), keyed on `app.tenant_id`, which `withTenant` sets per
 * transaction; and the table granted to the tenant role, to read only or to write too.
 *
 * `nullif(..., '')`: a setting that a session set and then reset reads as '' (not null), which
 * a bare `::uuid` cast would refuse with an error on every row; as null it matches nothing.
 */
export function tenantScopedTable(
  table: IdentifierSqlToken,
  policy: IdentifierSqlToken,
  access: 'read' | 'read-write',
): FragmentSqlToken[] {
  const role = sql.identifier([TENANT_ROLE]);
  return [
    sql.fragment`alter table ${table} enable row level security`,
    sql.fragment`alter table ${table} force row level security`,
    sql.fragment`create policy ${policy} on ${table} using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)`,
    access === 'read'
      ? sql.fragment`grant select on ${table} to ${role}`
      : sql.fragment`grant select, insert, update, delete on ${table} to ${role}`,
  ];
}

/** Group role of analysts' own database logins (created by migrations; `ops analysts grant` adds members). */
export const ANALYSTS_ROLE = 'eas_analysts';

/**
 * DDL that lets analysts' logins read a `tenantScopedTable`: SELECT for their group role, a
 * policy that shows a login its own tenant's rows (the tenant bound to the login's name, from
 * `analyst_tenant_id()`), and a restrictive one that keeps it to them. The tenant policy above
 * applies to every role and trusts `app.tenant_id`, which any session may set: without the
 * restrictive policy a login could set it to another tenant and read that tenant's rows
 * (docs/decisions/012-analyst-logins-bound-by-name.md).
 */
export function analystReadable(table: IdentifierSqlToken, named: (suffix: string) => IdentifierSqlToken): FragmentSqlToken[] {
  const role = sql.identifier([ANALYSTS_ROLE]);
  return [
    sql.fragment`grant select on ${table} to ${role}`,
    sql.fragment`create policy ${named('analyst')} on ${table} for select to ${role} using (tenant_id = (select analyst_tenant_id()))`,
    sql.fragment`create policy ${named('analyst_only')} on ${table} as restrictive to ${role} using (tenant_id = (select analyst_tenant_id()))`,
  ];
}

/**
 * A read model's tenant table as projections build it: `tenantScopedTable` for the service's
 * tenant role (policy `<table>_tenant`) and `analystReadable` for analysts' logins, so that no
 * read-model table is granted to analysts without its restrictive policy.
 */
export function readModelTable(
  table: IdentifierSqlToken,
  named: (suffix: string) => IdentifierSqlToken,
  access: 'read' | 'read-write',
): FragmentSqlToken[] {
  return [...tenantScopedTable(table, named('tenant'), access), ...analystReadable(table, named)];
}
