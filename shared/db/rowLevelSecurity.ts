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
