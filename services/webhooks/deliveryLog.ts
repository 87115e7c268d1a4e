import { z } from 'zod';
import type { ValueExpression } from 'slonik';
import { idRow, ignoredRows, sql, withTenant, type DatabasePool } from '../../shared/db/pool.ts';
import type { GlobalPosition } from '../../shared/event-store/port.ts';
import { storableText } from '../../shared/validation.ts';

/**
 * The delivery log: each attempt recorded with the endpoint's move (cursor, retry, disable) in
 * one transaction under the lease, the log as the API lists it, and its retention.
 */
const deliveryRow = z.object({
  commit: z.string(),
  prepare: z.string(),
  type: z.string(),
  status: z.enum(['retrying', 'succeeded', 'failed']),
  attempts: z.number(),
  last_status_code: z.number().nullable(),
  last_error: z.string().nullable(),
  last_attempt_at: z.string(),
  next_attempt_at: z.string().nullable(),
  attempt_log: z.array(
    z.object({ at: z.string(), statusCode: z.number().nullable(), durationMs: z.number(), error: z.string().nullable() }),
  ),
});

/** One attempt as the log keeps it: when it started, the receiver's status code (none: no answer), how long it took, why it failed. */
export type AttemptEntry = {
  readonly at: string;
  readonly statusCode: number | null;
  readonly durationMs: number;
  readonly error: string | null;
};

/**
 * The attempts an entry keeps, the latest: the default schedule makes 9 per change, and every
 * replay of the change adds more, which must not grow a row without bound.
 */
export const ATTEMPTS_KEPT = 20;
/**
 * Appends `added` to the entry's attempts (`d`, the row in an upsert) and keeps the latest
 * ATTEMPTS_KEPT, none from before `since` (the log's retention: an entry attempted again keeps
 * its row, and would otherwise keep attempts the retention said were gone). Attempt times are
 * ISO 8601 in UTC with milliseconds, so they compare as strings.
 */
const appendAttempts = (added: ValueExpression, since: Date) =>
  sql.fragment`jsonb_path_query_array(
    jsonb_path_query_array(d.attempt_log || ${added}, '$[*] ? (@.at >= $since)', jsonb_build_object('since', ${since.toISOString()}::text)),
    ${`$[last - ${ATTEMPTS_KEPT - 1} to last]`}::jsonpath)`;
const attemptJson = (a: { at: Date; statusCode: number | null; durationMs: number; error: string | null }) =>
  JSON.stringify([{ at: a.at.toISOString(), statusCode: a.statusCode, durationMs: Math.round(a.durationMs), error: a.error }]);

export type DeliveryRecord = {
  readonly position: GlobalPosition;
  readonly type: string;
  readonly status: 'retrying' | 'succeeded' | 'failed';
  readonly attempts: number;
  readonly lastStatusCode: number | null;
  readonly lastError: string | null;
  readonly lastAttemptAt: string;
  readonly nextAttemptAt: string | null;
  /** The latest ATTEMPTS_KEPT attempts, oldest first. */
  readonly attemptLog: readonly AttemptEntry[];
};

export type DeliveryStatus = DeliveryRecord['status'];

export async function listDeliveries(
  pool: DatabasePool,
  tenantId: string,
  endpointId: string,
  limit: number,
  status?: DeliveryStatus,
): Promise<DeliveryRecord[]> {
  const rows = await withTenant(pool, tenantId, (tx) =>
    tx.any(sql.type(deliveryRow)`
      select commit_position::text as commit, prepare_position::text as prepare, type, status, attempts,
             last_status_code, last_error, last_attempt_at, next_attempt_at, attempt_log
      from webhook_deliveries where tenant_id = ${tenantId} and endpoint_id = ${endpointId}
        ${status === undefined ? sql.fragment`` : sql.fragment`and status = ${status}`}
      order by last_attempt_at desc, commit_position desc, prepare_position desc limit ${limit}
    `),
  );
  return rows.map((r) => ({
    position: { commit: BigInt(r.commit), prepare: BigInt(r.prepare) },
    type: r.type,
    status: r.status,
    attempts: r.attempts,
    lastStatusCode: r.last_status_code,
    lastError: r.last_error,
    lastAttemptAt: r.last_attempt_at,
    nextAttemptAt: r.next_attempt_at,
    attemptLog: r.attempt_log,
  }));
}

export type AttemptRecord = {
  readonly change: { readonly position: GlobalPosition; readonly type: string };
  readonly statusCode: number | null;
  readonly error: string | null;
  /** When the attempt started (the worker's clock) and how long it took. */
  readonly at: Date;
  readonly durationMs: number;
  /** The entry's earlier attempts from before this go (the log's retention). */
  readonly attemptsSince: Date;
  /**
   * What the endpoint becomes: moved past the change, retrying it `delayMs` from now (the
   * database's now, the clock that decides when it is due), or disabled.
   */
  readonly outcome:
    | { readonly kind: 'delivered' }
    | { readonly kind: 'retry'; readonly failedAttempts: number; readonly delayMs: number }
    | { readonly kind: 'disable'; readonly reason: string };
};

/** Longest error text an attempt keeps (its reason, when it disables the endpoint, twice that). */
export const ERROR_TEXT_MAX = 500;

/**
 * Records one attempt and moves the endpoint accordingly, in one transaction, only while the
 * lease is ours (false: it was lost, and whoever holds it now carries on).
 */
export async function recordAttempt(
  pool: DatabasePool,
  tenantId: string,
  id: string,
  token: string,
  attempt: AttemptRecord,
): Promise<boolean> {
  const { change, outcome } = attempt;
  // Texts that quote an error (a receiver's doing, some of them: a certificate's names, a
  // parser's complaint) are made storable: one that PostgreSQL refused would lose the attempt and
  // the endpoint's move with it.
  const error = attempt.error === null ? null : storableText(attempt.error, ERROR_TEXT_MAX);
  const reason = outcome.kind === 'disable' ? storableText(outcome.reason, 2 * ERROR_TEXT_MAX) : null;
  const commit = change.position.commit.toString();
  const prepare = change.position.prepare.toString();
  return withTenant(pool, tenantId, async (tx) => {
    const moved = await tx.maybeOne(sql.type(idRow)`
      update webhook_endpoints set
        cursor_commit = case when ${outcome.kind} = 'delivered' then ${commit}::numeric else cursor_commit end,
        cursor_prepare = case when ${outcome.kind} = 'delivered' then ${prepare}::numeric else cursor_prepare end,
        failed_attempts = ${outcome.kind === 'retry' ? outcome.failedAttempts : 0},
        next_attempt_at = ${outcome.kind === 'retry' ? sql.fragment`now() + make_interval(secs => ${outcome.delayMs / 1000})` : sql.fragment`null::timestamptz`},
        retrying_since = ${outcome.kind === 'retry' ? sql.fragment`case when failed_attempts = 0 then now() else coalesce(retrying_since, now()) end` : sql.fragment`null`},
        status = case when ${outcome.kind} = 'disable' then 'disabled' else status end,
        disabled_reason = ${reason}
      where tenant_id = ${tenantId} and id = ${id} and lease_token = ${token}
      returning id::text
    `);
    if (!moved) return false;
    const status = outcome.kind === 'delivered' ? 'succeeded' : outcome.kind === 'retry' ? 'retrying' : 'failed';
    await tx.query(sql.type(ignoredRows)`
      insert into webhook_deliveries as d (endpoint_id, tenant_id, commit_position, prepare_position, type, status, attempts,
        last_status_code, last_error, last_attempt_at, next_attempt_at, attempt_log)
      values (${id}, ${tenantId}, ${commit}, ${prepare}, ${change.type}, ${status}, 1, ${attempt.statusCode}, ${error}, now(),
        ${outcome.kind === 'retry' ? sql.fragment`now() + make_interval(secs => ${outcome.delayMs / 1000})` : sql.fragment`null::timestamptz`},
        ${attemptJson({ ...attempt, error })}::jsonb)
      on conflict (endpoint_id, commit_position, prepare_position) do update set
        status = excluded.status, attempts = d.attempts + 1, last_status_code = excluded.last_status_code,
        last_error = excluded.last_error, last_attempt_at = excluded.last_attempt_at, next_attempt_at = excluded.next_attempt_at,
        attempt_log = ${appendAttempts(sql.fragment`excluded.attempt_log`, attempt.attemptsSince)}
    `);
    return true;
  });
}

/**
 * Records a run of successful deliveries and moves the cursor past the last (or to `moveTo`), in one
 * transaction, only while the lease is ours. Batching these is safe for at-least-once: a crash
 * before this commits only means those changes are delivered again (same `webhook-id`).
 */
export async function recordDelivered(
  pool: DatabasePool,
  tenantId: string,
  id: string,
  token: string,
  delivered: ReadonlyArray<{
    readonly position: GlobalPosition;
    readonly type: string;
    readonly statusCode: number;
    /** When the attempt started, and how long it took. */
    readonly at: Date;
    readonly durationMs: number;
  }>,
  /** Extends the lease by this much from now (a long run of deliveries keeps it). */
  leaseMs: number,
  /** Where the cursor goes instead of the last delivered: past later changes of types the endpoint does not take. */
  moveTo: GlobalPosition | undefined,
  /** An entry's earlier attempts from before this go (the log's retention). */
  attemptsSince: Date,
): Promise<boolean> {
  const last = delivered.at(-1);
  const to = moveTo ?? last?.position;
  // A cursor that moves leaves behind whatever was being retried, even with nothing delivered
  // (the change retried is no longer in the feed, and `moveTo` passes others): its retry state
  // goes, else the next change would inherit its failure count and its retry deadline.
  return withTenant(pool, tenantId, async (tx) => {
    const moved = await tx.maybeOne(sql.type(idRow)`
      update webhook_endpoints set
        cursor_commit = ${to ? sql.fragment`${to.commit.toString()}::numeric` : sql.fragment`cursor_commit`},
        cursor_prepare = ${to ? sql.fragment`${to.prepare.toString()}::numeric` : sql.fragment`cursor_prepare`},
        failed_attempts = ${to ? sql.fragment`0` : sql.fragment`failed_attempts`},
        next_attempt_at = ${to ? sql.fragment`null` : sql.fragment`next_attempt_at`},
        retrying_since = ${to ? sql.fragment`null` : sql.fragment`retrying_since`},
        lease_until = now() + make_interval(secs => ${leaseMs / 1000})
      where tenant_id = ${tenantId} and id = ${id} and lease_token = ${token}
      returning id::text
    `);
    if (!moved) return false;
    if (!last) return true;
    await tx.query(sql.type(ignoredRows)`
      insert into webhook_deliveries as d (endpoint_id, tenant_id, commit_position, prepare_position, type, status, attempts,
        last_status_code, last_error, last_attempt_at, next_attempt_at, attempt_log)
      select ${id}, ${tenantId}, t.commit_position, t.prepare_position, t.type, 'succeeded', 1, t.status_code, null, t.done_at, null, t.attempt
      from ${sql.unnest(
        delivered.map((d) => [
          d.position.commit.toString(),
          d.position.prepare.toString(),
          d.type,
          d.statusCode,
          new Date(d.at.getTime() + d.durationMs).toISOString(),
          attemptJson({ ...d, error: null }),
        ]),
        ['numeric', 'numeric', 'text', 'int4', 'timestamptz', 'jsonb'],
      )} as t(commit_position, prepare_position, type, status_code, done_at, attempt)
      on conflict (endpoint_id, commit_position, prepare_position) do update set
        status = 'succeeded', attempts = d.attempts + 1, last_status_code = excluded.last_status_code,
        last_error = null, last_attempt_at = excluded.last_attempt_at, next_attempt_at = null,
        attempt_log = ${appendAttempts(sql.fragment`excluded.attempt_log`, attemptsSince)}
    `);
    return true;
  });
}

/**
 * The delivery log's retention: deletes the entries whose last attempt is older than `before`,
 * except a retry still to come (status `retrying`, next attempt not yet past), at most `batch`
 * rows per statement, until none is left; returns how many went. Endpoint by endpoint through
 * the log's (endpoint_id, last_attempt_at) index, so each statement reads only what it deletes.
 * An entry attempted again meanwhile is a new row version (ctid), which the delete does not
 * match: it is kept. Reads across tenants (the worker's role bypasses RLS); idempotent, so
 * several workers may run it.
 */
export async function trimDeliveries(pool: DatabasePool, before: Date, batch = 5_000): Promise<number> {
  let deleted = 0;
  for (;;) {
    const result = await pool.query(sql.type(ignoredRows)`
      delete from webhook_deliveries
      where ctid = any(array(
          select old.ctid from webhook_endpoints e
          cross join lateral (
            select x.ctid from webhook_deliveries x
            where x.endpoint_id = e.id and x.last_attempt_at < ${before.toISOString()}::timestamptz
              and not (x.status = 'retrying' and x.next_attempt_at >= now())
            limit ${batch}
          ) old
          limit ${batch}))
    `);
    deleted += result.rowCount;
    if (result.rowCount < batch) return deleted;
  }
}
