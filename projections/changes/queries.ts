import { z } from 'zod';
import type { FragmentSqlToken, ValueExpression } from 'slonik';
import { sql, withTenant, type DatabasePool, type Queryable } from '../../shared/db/pool.ts';
import { sqlStateOf } from '../../shared/db/sqlState.ts';
import { readCheckpoint } from '../../shared/projections/checkpoints.ts';
import { wasParkedAt } from '../../shared/projections/parking.ts';
import { START, comparePositions, type GlobalPosition } from '../../shared/event-store/port.ts';
import { BLANK_PERSONAL_VIEW_FIELDS } from '../../services/employees/contract.ts';
import { CHANGES_PROJECTION, PUBLIC_CHANGE_TYPES, employeeView, type ChangeType, type EmployeeView } from './changesProjection.ts';

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

const positionRow = z.object({ commit: z.string(), prepare: z.string() });

const scannedPageSchema = pageSchema.omit({ known: true }).extend({ last: positionRow.nullable() });

/**
 * SQL: the `employee` of the change row `c` as every reader is served it (the feed's pages, a
 * webhook's body). A change of a person the erasure ledger (`employee_erasures`, the employees
 * capability's table) records has the personal fields blank: the projector blanks the stored rows
 * only when it applies the erasure, which may lag or be stopped, while the ledger has it from the
 * erasure's commit. One probe of the ledger's primary key per change.
 */
export const servedEmployee = sql.fragment`case
    when exists (select 1 from employee_erasures r where r.tenant_id = c.tenant_id and r.employee_id = c.employee_id)
    then c.employee || ${sql.jsonb(BLANK_PERSONAL_VIEW_FIELDS)}
    else c.employee end`;

/**
 * The page `rows` (rows of `employee_changes`, in parentheses) as one JSON array in `order`, the
 * shape `pageSchema` validates; null when there are none.
 */
const pageJson = (order: FeedOrder, rows: FragmentSqlToken) => sql.fragment`(select json_agg(json_build_object(
    'commit', c.commit_position::text, 'prepare', c.prepare_position::text, 'type', c.type,
    'employeeId', c.employee_id,
    'occurredAt', to_char(c.occurred_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
    'employee', ${servedEmployee}) order by ${order.orderBy})
  from ${rows} c)`;

export type ChangesPage = {
  /**
   * False when `after` names no change of this tenant (and is not the start): neither one in the
   * feed now nor one the feed had until a rebuild parked it (`parkedHere`).
   */
  readonly known: boolean;
  readonly changes: readonly ChangeRecord[];
};

/**
 * The feed's order, as SQL over `employee_changes` aliased `c`: `after(tenant, commit, prepare)`
 * holds for the changes after the one a cursor names (a log position of the tenant's, or the
 * start), `orderBy` lists them, `last` is the newest. The arguments are SQL values or columns.
 */
export type FeedOrder = {
  after(tenantId: ValueExpression, commit: ValueExpression, prepare: ValueExpression): FragmentSqlToken;
  /** Holds when the tenant's feed has the change at (commit, prepare). */
  has(tenantId: ValueExpression, commit: ValueExpression, prepare: ValueExpression): FragmentSqlToken;
  readonly orderBy: FragmentSqlToken;
  readonly last: FragmentSqlToken;
};

/**
 * Apply order (`seq`, see changesProjection.ts): after a cursor come the rows with a greater
 * `seq` than the change it names, including one that `projections retry` applied after the
 * reader passed its log position. The start, and a cursor whose change is no longer in the
 * table (a rebuild parked an event the model before it had applied), stand just before the
 * first change applied with a later log position (or after the last change, if none is later):
 * nothing after it is skipped, and a webhook endpoint holding such a cursor never starts over
 * from the beginning; a change applied late with an earlier position may come again (receivers
 * dedupe). The feed resumes a gone cursor of the tenant's the same way (`known`, `parkedHere`).
 *
 * The cursor is looked up by functions of the changes' migrations, as a sub-select: as the tenant
 * role, a look-up by log position written here would read every change of the tenant (row-level
 * security keeps numeric comparisons off the index), and so would the page's own `seq` range,
 * which would carry that look-up.
 */
const APPLY_ORDER: FeedOrder = {
  after: (tenantId, commit, prepare) => sql.fragment`c.seq > (select employee_changes_seq_after(${tenantId}, ${commit}, ${prepare}))`,
  has: (tenantId, commit, prepare) => sql.fragment`(select employee_changes_seq_at(${tenantId}, ${commit}, ${prepare})) is not null`,
  orderBy: sql.fragment`c.seq`,
  last: sql.fragment`c.seq desc`,
};

/** Log order: version 1 of the table (no `seq`), whose rows are in log order. */
const LOG_ORDER: FeedOrder = {
  after: (_tenantId, commit, prepare) => sql.fragment`(c.commit_position, c.prepare_position) > (${commit}, ${prepare})`,
  has: (tenantId, commit, prepare) => sql.fragment`exists (
    select 1 from employee_changes k where k.tenant_id = ${tenantId} and k.commit_position = ${commit} and k.prepare_position = ${prepare})`,
  orderBy: sql.fragment`c.commit_position, c.prepare_position`,
  last: sql.fragment`c.commit_position desc, c.prepare_position desc`,
};

/**
 * Runs a read of the feed in apply order; while the live table is still version 1 (a rolling
 * deploy: the new projector is building version 2 in shadow tables and the old one serves), in
 * log order, which is that table's order. `read` runs again from the start (its own
 * transaction), since the failed statement aborted the first one's. Every read tries apply
 * order first (no remembered fallback): a read in log order of the version-2 table could skip
 * the changes its swap applied last. For the same reason, when version 2 swapped in between the
 * two reads (the swap renames the table and moves the version in one commit), the read runs a
 * third time, in apply order. So during the deploy window each read costs one failed statement
 * and one version look-up more, and PostgreSQL logs the failure; `projections status` shows the
 * live version.
 */
export async function inFeedOrder<T>(db: Queryable, read: (order: FeedOrder) => Promise<T>): Promise<T> {
  try {
    return await read(APPLY_ORDER);
  } catch (error) {
    if (sqlStateOf(error) !== UNDEFINED_COLUMN) throw error;
    const result = await read(LOG_ORDER);
    const live = await readCheckpoint(db, CHANGES_PROJECTION);
    return live && live.version >= APPLY_ORDER_VERSION ? read(APPLY_ORDER) : result;
  }
}
const UNDEFINED_COLUMN = '42703';
/** The version of `employees-changes` that added `seq`. */
const APPLY_ORDER_VERSION = 2;

/**
 * SQL that holds when, among the tenant's next `window` changes after the cursor (commit,
 * prepare) in the feed's `order`, one is of `types`, or there are `window` of them (a reader
 * filtering rare types should move its cursor past them). The arguments are SQL values or the
 * caller's columns (a webhook endpoint's tenant, cursor and subscribed types), so a query over
 * other tables can ask the feed without knowing its table. It reads at most `window` rows however
 * far behind the cursor is, so its cost does not grow with the changes a filter skips.
 */
export function changeWithin(
  order: FeedOrder,
  tenantId: ValueExpression,
  commit: ValueExpression,
  prepare: ValueExpression,
  types: ValueExpression,
  window: number,
): FragmentSqlToken {
  // The first test stops at the first change of its types; the second only runs without one.
  return sql.fragment`(exists (
          select 1 from (select c.type from employee_changes c
                         where c.tenant_id = ${tenantId} and ${order.after(tenantId, commit, prepare)}
                         order by ${order.orderBy} limit ${window}) w
          where w.type = any(${types}))
        or exists (
          select 1 from employee_changes c
          where c.tenant_id = ${tenantId} and ${order.after(tenantId, commit, prepare)}
          order by ${order.orderBy} offset ${window - 1} limit 1))`;
}

export type ScannedPage = {
  /** The changes of the types asked for among the next `window`, at most `limit`. */
  readonly changes: readonly ChangeRecord[];
  /**
   * The last of the `window` changes looked at, when `changes` holds every one of the types asked
   * for among them: a reader that has handled `changes` may move its cursor here, past the others.
   * Null when there was nothing after the cursor, or `changes` was cut at `limit`.
   */
  readonly scannedTo: GlobalPosition | null;
};

/**
 * The tenant's changes of `types` after `after` (a cursor the caller trusts: a webhook
 * endpoint's own), looking at the next `window` changes only, in feed order. Row-level security
 * applies.
 */
export async function scanChanges(
  pool: DatabasePool,
  tenantId: string,
  after: GlobalPosition,
  types: readonly string[],
  limit: number,
  window: number,
): Promise<ScannedPage> {
  const commit = after.commit.toString();
  const prepare = after.prepare.toString();
  const row = await inFeedOrder(pool, (order) => {
    // The next `window` changes after the cursor, as an index range read in feed order: the page
    // stops reading at its `limit`-th change of `types`.
    const looked = sql.fragment`(
      select * from employee_changes c
      where c.tenant_id = ${tenantId} and ${order.after(tenantId, sql.fragment`${commit}::numeric`, sql.fragment`${prepare}::numeric`)}
      order by ${order.orderBy} limit ${window}) c`;
    return withTenant(pool, tenantId, (tx) =>
      tx.one(sql.type(scannedPageSchema)`
      select p.page,
        -- The last change looked at matters only when the page holds every change of its types in
        -- the window (fewer than the limit): only then is the whole window read (a subquery in a
        -- CASE runs only when its branch is taken), while it is fresh from the page's own read. A
        -- page cut at the limit read only up to its last change.
        case when json_array_length(p.page) < ${limit} then (
          select json_build_object('commit', c.commit_position::text, 'prepare', c.prepare_position::text)
          from ${looked} order by ${order.last} limit 1)
        end as last
      from (select coalesce(${pageJson(
        order,
        sql.fragment`(select * from ${looked} where c.type = any(${sql.array([...types], 'text')}) order by ${order.orderBy} limit ${limit})`,
      )}, '[]'::json) as page offset 0) p -- (offset 0: the page is built once, not once per use of p.page)
    `),
    );
  });
  const changes = row.page.map(({ commit: c, prepare: p, ...rest }) => ({ ...rest, position: { commit: BigInt(c), prepare: BigInt(p) } }));
  const scannedTo = row.last && changes.length < limit ? { commit: BigInt(row.last.commit), prepare: BigInt(row.last.prepare) } : null;
  return { changes, scannedTo };
}

/** The tenant's last change applied (where a new webhook endpoint starts), or null when it has none. */
export async function latestChange(pool: DatabasePool, tenantId: string): Promise<GlobalPosition | null> {
  const row = await inFeedOrder(pool, (order) =>
    withTenant(pool, tenantId, (tx) =>
      tx.maybeOne(sql.type(positionRow)`
        select c.commit_position::text as commit, c.prepare_position::text as prepare from employee_changes c
        where c.tenant_id = ${tenantId} order by ${order.last} limit 1
      `),
    ),
  );
  return row ? { commit: BigInt(row.commit), prepare: BigInt(row.prepare) } : null;
}

/**
 * The tenant's changes after `after`, in the order they were applied (log order, except a
 * change `projections retry` applied late: it comes after the ones already applied), at most
 * `limit`; and whether `after` is a position this tenant's feed ever handed out (`known`). Row-level
 * security applies.
 *
 * A cursor whose change is gone (a rebuild parked it) is still the tenant's: it resumes just
 * before the first change applied after it (APPLY_ORDER), and `known` finds it among the events
 * the projection parked (`wasParkedAt`). `trusted`: the caller already knows `after` is one
 * (a webhook endpoint's own cursor, a long-poll's later slices), so that look-up is skipped. A
 * cursor that is neither gets `known` false and no changes.
 */
export async function readChanges(
  pool: DatabasePool,
  tenantId: string,
  after: GlobalPosition,
  limit: number,
  options: { readonly trusted?: boolean } = {},
): Promise<ChangesPage> {
  const isStart = comparePositions(after, START) === 0;
  const commit = after.commit.toString();
  const prepare = after.prepare.toString();
  const trusted = options.trusted === true;
  const at = [sql.fragment`${commit}::numeric`, sql.fragment`${prepare}::numeric`] as const;
  // The page only for a cursor found (the start and a trusted one need no look-up): finding where
  // the changes after an unknown one start reads every later change of the tenant, and most such
  // cursors are answered 400.
  const read = (unknownToo: boolean) =>
    inFeedOrder(pool, (order) =>
      withTenant(pool, tenantId, (tx) =>
        tx.one(sql.type(pageSchema)`
          select k.known, case when k.known or ${unknownToo} then coalesce(${pageJson(
            order,
            sql.fragment`(
              select * from employee_changes c
              where c.tenant_id = ${tenantId}
                and ${order.after(tenantId, ...at)}
              order by ${order.orderBy}
              limit ${limit}
            )`,
          )}, '[]'::json) else '[]'::json end as page
          from (select ${isStart || trusted ? sql.fragment`true` : order.has(tenantId, ...at)} as known offset 0) k
        `),
      ),
    );
  let row = await read(false);
  const known = row.known || (await wasParkedAt(pool, CHANGES_PROJECTION, tenantId, after));
  // A cursor the feed handed out before a rebuild parked its change: the feed resumes after it.
  if (known && !row.known) row = await read(true);
  return {
    known,
    changes: row.page.map(({ commit: c, prepare: p, ...rest }) => ({ ...rest, position: { commit: BigInt(c), prepare: BigInt(p) } })),
  };
}
