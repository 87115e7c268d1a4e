import { z } from 'zod';
import { sql, withTenant, type DatabasePool } from '../../shared/db/pool.ts';
import type { Employee } from '../../services/employees/decide.ts';
import type { EmployeeStatus } from '../../services/employees/events.ts';
import { employeeRowSchema } from './employeesProjection.ts';

/**
 * Reads of the employees read model. Every read runs through `withTenant` (row-level security
 * as the second wall) and also filters by tenant explicitly (so the indexes apply).
 */
export type EmployeeRecord = Omit<Employee, 'roleId'> & { readonly revision: number };

const recordRow = employeeRowSchema
  .omit({ tenant_id: true, updated_at: true })
  .transform(
    (r): EmployeeRecord => ({
      id: r.id,
      email: r.email,
      firstName: r.first_name,
      lastName: r.last_name,
      department: r.department,
      status: r.status,
      hiredAt: r.hired_at,
      revision: r.revision,
    }),
  );

const columns = sql.fragment`id, email, first_name, last_name, department, status, hired_at, revision`;

export type HiredBound = { readonly at: string; readonly dateOnly: boolean };

export type EmployeeFilter = {
  readonly department?: string;
  readonly status?: EmployeeStatus;
  /** Inclusive. A date means from its first instant (UTC). */
  readonly hiredFrom?: HiredBound;
  /** Inclusive. A date means up to its last instant (UTC). */
  readonly hiredTo?: HiredBound;
};

export type ListEmployeesQuery = EmployeeFilter & { readonly page: number; readonly limit: number };

function conditions(tenantId: string, filter: EmployeeFilter) {
  const parts = [sql.fragment`tenant_id = ${tenantId}::uuid`];
  if (filter.department !== undefined) parts.push(sql.fragment`department = ${filter.department}`);
  if (filter.status !== undefined) parts.push(sql.fragment`status = ${filter.status}`);
  if (filter.hiredFrom) parts.push(sql.fragment`hired_at >= ${filter.hiredFrom.at}::timestamptz`);
  if (filter.hiredTo) {
    parts.push(
      filter.hiredTo.dateOnly
        ? sql.fragment`hired_at < ${filter.hiredTo.at}::timestamptz + interval '1 day'`
        : sql.fragment`hired_at <= ${filter.hiredTo.at}::timestamptz`,
    );
  }
  return sql.join(parts, sql.fragment` and `);
}

/**
 * A page in the documented order: `hiredAt` descending, then `id` descending (ULIDs sort by
 * creation, so among equal hire instants the newest record comes first). `total` is exact:
 * from the maintained counters when only status/department filter, else counted with the index.
 */
export async function listEmployees(pool: DatabasePool, tenantId: string, query: ListEmployeesQuery) {
  return withTenant(pool, tenantId, async (tx) => {
    const where = conditions(tenantId, query);
    const data = await tx.any(sql.type(recordRow)`
      select ${columns} from employees where ${where}
      order by hired_at desc, id desc
      limit ${query.limit} offset ${(query.page - 1) * query.limit}
    `);
    const countersSuffice = query.hiredFrom === undefined && query.hiredTo === undefined;
    const total = countersSuffice
      ? await tx.oneFirst(sql.type(z.object({ total: z.number() }))`
          select coalesce(sum(count), 0)::int8 as total from employee_counts
          where ${conditions(tenantId, { status: query.status, department: query.department })}
        `)
      : await tx.oneFirst(sql.type(z.object({ total: z.number() }))`select count(*) as total from employees where ${where}`);
    return { data, total };
  });
}

export async function findEmployee(pool: DatabasePool, tenantId: string, id: string): Promise<EmployeeRecord | null> {
  return withTenant(pool, tenantId, (tx) =>
    tx.maybeOne(sql.type(recordRow)`select ${columns} from employees where tenant_id = ${tenantId}::uuid and id = ${id}`),
  );
}
