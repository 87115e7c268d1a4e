import { z } from 'zod';
import { sql, type DatabasePool } from '../../shared/db/pool.ts';
import type { GlobalPosition } from '../../shared/event-store/port.ts';
import { employeeView, type EmployeeView } from '../../projections/changes/changesProjection.ts';
import { servedEmployee } from '../../projections/changes/queries.ts';

const beforeSendRow = z.object({ ours: z.boolean(), left_ms: z.number(), employee: employeeView.nullable() });

export type BeforeSend = {
  /** The lease is still the run's own: a replay revokes it, another worker takes it once it ran out. */
  readonly ours: boolean;
  readonly leftMs: number;
  /**
   * The change's employee as the feed holds it now, its personal fields null once the person is
   * erased; null when the change is no longer in the feed.
   */
  readonly employee: EmployeeView | null;
};

/**
 * What a delivery run reads right before each send: its lease, and the change's employee as the
 * feed serves it at that moment (`servedEmployee`: blank once the erasure ledger has the person). A run reads its page at its start and may send from it for up to
 * a job's budget; an erasure meanwhile blanks the person's fields in the feed, and the body must
 * carry the blanked fields, not the page's copy. Only `employee` is read again: the rest of a
 * change is the event's own and never changes. Both are primary-key reads in the statement the
 * lease check already makes, so reading the change at send time costs no round trip; across
 * tenants like the rest of the worker's side.
 */
export async function readBeforeSend(
  pool: DatabasePool,
  tenantId: string,
  id: string,
  token: string,
  change: { readonly position: GlobalPosition },
): Promise<BeforeSend> {
  const row = await pool.maybeOne(sql.type(beforeSendRow)`
    select coalesce(e.lease_token = ${token}::uuid and e.lease_until > now(), false) as ours,
           coalesce(extract(epoch from e.lease_until - now()) * 1000, 0)::float8 as left_ms,
           (select ${servedEmployee} from employee_changes c
            where c.tenant_id = ${tenantId} and c.commit_position = ${change.position.commit.toString()}::numeric
              and c.prepare_position = ${change.position.prepare.toString()}::numeric) as employee
    from webhook_endpoints e where e.tenant_id = ${tenantId} and e.id = ${id}
  `);
  return { ours: row?.ours ?? false, leftMs: row?.left_ms ?? 0, employee: row?.employee ?? null };
}
