import { z } from 'zod';
import type { ValueExpression } from 'slonik';
import { sql, withTenant, type DatabasePool } from '../../shared/db/pool.ts';
import { START, comparePositions, type GlobalPosition } from '../../shared/event-store/port.ts';
import { PUBLIC_CHANGE_TYPES, employeeView, type ChangeType, type EmployeeView } from './changesProjection.ts';

export type ChangeRecord = {
  readonly position: GlobalPosition;
  readonly type: ChangeType;
  readonly employeeId: string;
  readonly occurredAt: string;
  readonly employee: EmployeeView;
};

// SQL shapes the whole page into one JSON value, validated once per page (not per row).
const pageSchema = z.object({
  known: z.boolean(),
  page: z.array(
    z.object({
      commit: z.string(),
      prepare: z.string(),
      type: z.enum(PUBLIC_CHANGE_TYPES as [ChangeType, ...ChangeType[]]),
      employeeId: z.string(),
      occurredAt: z.string(),
      employee: employeeView,
    }),
  ),
});

export type ChangesPage = {
  /** False when `after` names no change of this tenant (and is not the start). */
  readonly known: boolean;
  readonly changes: readonly ChangeRecord[];
};

/**
 * Where a feed reader stands in apply order (`seq`, see changesProjection.ts): the number of the
 * change its cursor names (a log position of the tenant's), 0 for the start. Every later change
 * is the rows with a greater `seq`, including one that `projections retry` applied after the
 * reader passed its log position. The arguments are SQL values or columns.
 */
export const cursorSeq = (tenantId: ValueExpression, commit: ValueExpression, prepare: ValueExpression) => sql.fragment`coalesce((
  select k.seq from employee_changes k
  where k.tenant_id = ${tenantId} and k.commit_position = ${commit} and k.prepare_position = ${prepare}
), 0)`;

/**
 * The tenant's changes after `after`, in the order they were applied (log order, except a
 * change `projections retry` applied late: it comes after the ones already applied), at most
 * `limit`; and whether
 * `after` is a position this tenant's feed ever handed out. Row-level security applies.
 * `types` (optional) keeps only those change types.
 */
export async function readChanges(
  pool: DatabasePool,
  tenantId: string,
  after: GlobalPosition,
  limit: number,
  types?: readonly string[],
): Promise<ChangesPage> {
  const isStart = comparePositions(after, START) === 0;
  const commit = after.commit.toString();
  const prepare = after.prepare.toString();
  const typeFilter = types ? sql.fragment`and type = any(${sql.array([...types], 'text')})` : sql.fragment``;
  const row = await withTenant(pool, tenantId, (tx) =>
    tx.one(sql.type(pageSchema)`
      select
        (${isStart} or exists (
          select 1 from employee_changes
          where tenant_id = ${tenantId} and commit_position = ${commit}::numeric and prepare_position = ${prepare}::numeric
        )) as known,
        coalesce((
          select json_agg(json_build_object(
            'commit', c.commit_position::text, 'prepare', c.prepare_position::text, 'type', c.type,
            'employeeId', c.employee_id,
            'occurredAt', to_char(c.occurred_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
            'employee', c.employee) order by c.seq)
          from (
            select * from employee_changes
            where tenant_id = ${tenantId}
              and seq > ${cursorSeq(tenantId, sql.fragment`${commit}::numeric`, sql.fragment`${prepare}::numeric`)}
              ${typeFilter}
            order by seq
            limit ${limit}
          ) c
        ), '[]'::json) as page
    `),
  );
  return {
    known: row.known,
    changes: row.page.map(({ commit: c, prepare: p, ...rest }) => ({ ...rest, position: { commit: BigInt(c), prepare: BigInt(p) } })),
  };
}
