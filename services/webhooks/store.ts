import { z } from 'zod';
import type { ValueExpression } from 'slonik';
import { sql, withTenant, type DatabasePool } from '../../shared/db/pool.ts';
import type { GlobalPosition } from '../../shared/event-store/port.ts';
import { inFeedOrder } from '../../projections/changes/queries.ts';

/** The SQL of the webhooks capability: endpoints, their feed position and lease, the delivery log. */
const endpointRow = z.object({
  id: z.string(),
  tenant_id: z.string(),
  url: z.string(),
  event_types: z.array(z.string()),
  secret_sealed: z.string(),
  status: z.enum(['active', 'disabled']),
  disabled_reason: z.string().nullable(),
  created_at: z.string(),
  cursor_commit: z.string(),
  cursor_prepare: z.string(),
  failed_attempts: z.number(),
  next_attempt_at: z.string().nullable(),
  retrying_since: z.string().nullable(),
});

export type EndpointRecord = {
  readonly id: string;
  readonly tenantId: string;
  readonly url: string;
  readonly eventTypes: readonly string[];
  readonly secretSealed: string;
  readonly status: 'active' | 'disabled';
  readonly disabledReason: string | null;
  readonly createdAt: string;
  /** The last change delivered (or the start position it was created/replayed at). */
  readonly cursor: GlobalPosition;
  readonly failedAttempts: number;
  readonly nextAttemptAt: string | null;
  /** When the change being retried first failed (null while nothing is retried). */
  readonly retryingSince: string | null;
};

const toEndpoint = (r: z.infer<typeof endpointRow>): EndpointRecord => ({
  id: r.id,
  tenantId: r.tenant_id,
  url: r.url,
  eventTypes: r.event_types,
  secretSealed: r.secret_sealed,
  status: r.status,
  disabledReason: r.disabled_reason,
  createdAt: r.created_at,
  cursor: { commit: BigInt(r.cursor_commit), prepare: BigInt(r.cursor_prepare) },
  failedAttempts: r.failed_attempts,
  nextAttemptAt: r.next_attempt_at,
  retryingSince: r.retrying_since,
});

const endpointColumns = sql.fragment`
  id::text, tenant_id::text, url, event_types, secret_sealed, status, disabled_reason, created_at,
  cursor_commit::text, cursor_prepare::text, failed_attempts, next_attempt_at, retrying_since
`;

export async function insertEndpoint(
  pool: DatabasePool,
  e: { id: string; tenantId: string; url: string; eventTypes: readonly string[]; secretSealed: string; cursor: GlobalPosition },
): Promise<EndpointRecord> {
  return withTenant(pool, e.tenantId, async (tx) =>
    toEndpoint(
      await tx.one(sql.type(endpointRow)`
        insert into webhook_endpoints (id, tenant_id, url, event_types, secret_sealed, cursor_commit, cursor_prepare)
        values (${e.id}, ${e.tenantId}, ${e.url}, ${sql.array([...e.eventTypes], 'text')}, ${e.secretSealed},
                ${e.cursor.commit.toString()}, ${e.cursor.prepare.toString()})
        returning ${endpointColumns}
      `),
    ),
  );
}

export async function listEndpoints(pool: DatabasePool, tenantId: string): Promise<EndpointRecord[]> {
  const rows = await withTenant(pool, tenantId, (tx) =>
    tx.any(sql.type(endpointRow)`select ${endpointColumns} from webhook_endpoints where tenant_id = ${tenantId} order by created_at, id`),
  );
  return rows.map(toEndpoint);
}

export async function findEndpoint(pool: DatabasePool, tenantId: string, id: string): Promise<EndpointRecord | null> {
  const row = await withTenant(pool, tenantId, (tx) =>
    tx.maybeOne(sql.type(endpointRow)`select ${endpointColumns} from webhook_endpoints where tenant_id = ${tenantId} and id = ${id}`),
  );
  return row ? toEndpoint(row) : null;
}

export async function deleteEndpoint(pool: DatabasePool, tenantId: string, id: string): Promise<boolean> {
  const row = await withTenant(pool, tenantId, (tx) =>
    tx.maybeOne(sql.type(z.object({ id: z.string() }))`delete from webhook_endpoints where tenant_id = ${tenantId} and id = ${id} returning id::text`),
  );
  return row !== null;
}

/**
 * A lease revoked by a replay: the holder's token with its UUID version digit set to 0. Live
 * tokens are random v4 UUIDs, so a revoked one never equals a live one, revoking twice gives the
 * same value, and the holder, which knows its own token, can still release it (releaseLease).
 */
const revoked = (token: ValueExpression) => sql.fragment`overlay(${token}::text placing '0' from 15 for 1)::uuid`;

/**
 * Replay: move the endpoint back (or forward) to `cursor`, re-activate it, forget its retry state.
 *
 * A run delivering to the endpoint at this moment must neither move the cursor past the rewind
 * nor go on sending from the old cursor, and no second run may start while its attempt is still
 * in flight (one delivery in flight per endpoint). So the lease is not cleared but revoked: its
 * token becomes the revoked form (the holder's recordDelivered/recordAttempt then match nothing,
 * and the check it makes before every send, `leaseState`, says it is no longer its), while
 * `lease_until` stays, so acquireLease refuses everyone else until the holder releases it
 * (releaseLease matches the revoked form) after its attempt in flight, or the lease runs out if
 * the holder died. `handingOver` tells the caller to wait for that (`leaseRevoked`). A lease
 * already run out is cleared, as before.
 */
export async function rewindEndpoint(
  pool: DatabasePool,
  tenantId: string,
  id: string,
  cursor: GlobalPosition,
): Promise<(EndpointRecord & { readonly handingOver: boolean }) | null> {
  const row = await withTenant(pool, tenantId, (tx) =>
    tx.maybeOne(sql.type(endpointRow.extend({ handing_over: z.boolean() }))`
      update webhook_endpoints set cursor_commit = ${cursor.commit.toString()}, cursor_prepare = ${cursor.prepare.toString()},
        status = 'active', disabled_reason = null, failed_attempts = 0, next_attempt_at = null, retrying_since = null,
        lease_token = case when lease_until >= now() then ${revoked(sql.fragment`lease_token`)} end,
        lease_until = case when lease_until >= now() then lease_until end
      where tenant_id = ${tenantId} and id = ${id}
      returning ${endpointColumns}, lease_until is not null as handing_over
    `),
  );
  return row ? { ...toEndpoint(row), handingOver: row.handing_over } : null;
}

/** Whether a replay's revoked lease is still held (its holder has not released it and it has not run out). */
export async function leaseRevoked(pool: DatabasePool, tenantId: string, id: string): Promise<boolean> {
  const row = await withTenant(pool, tenantId, (tx) =>
    tx.maybeOne(sql.type(z.object({ revoked: z.boolean() }))`
      select coalesce(lease_token = ${revoked(sql.fragment`lease_token`)} and lease_until >= now(), false) as revoked
      from webhook_endpoints where tenant_id = ${tenantId} and id = ${id}
    `),
  );
  return row?.revoked ?? false;
}

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
});

export type DeliveryRecord = {
  readonly position: GlobalPosition;
  readonly type: string;
  readonly status: 'retrying' | 'succeeded' | 'failed';
  readonly attempts: number;
  readonly lastStatusCode: number | null;
  readonly lastError: string | null;
  readonly lastAttemptAt: string;
  readonly nextAttemptAt: string | null;
};

export async function listDeliveries(pool: DatabasePool, tenantId: string, endpointId: string, limit: number): Promise<DeliveryRecord[]> {
  const rows = await withTenant(pool, tenantId, (tx) =>
    tx.any(sql.type(deliveryRow)`
      select commit_position::text as commit, prepare_position::text as prepare, type, status, attempts,
             last_status_code, last_error, last_attempt_at, next_attempt_at
      from webhook_deliveries where tenant_id = ${tenantId} and endpoint_id = ${endpointId}
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
  }));
}

/** The tenant's last change applied (where a new endpoint starts), or null when it has none. */
export async function latestChange(pool: DatabasePool, tenantId: string): Promise<GlobalPosition | null> {
  const row = await inFeedOrder(pool, (order) =>
    withTenant(pool, tenantId, (tx) =>
      tx.maybeOne(sql.type(z.object({ commit: z.string(), prepare: z.string() }))`
        select c.commit_position::text as commit, c.prepare_position::text as prepare from employee_changes c
        where c.tenant_id = ${tenantId} order by ${order.last} limit 1
      `),
    ),
  );
  return row ? { commit: BigInt(row.commit), prepare: BigInt(row.prepare) } : null;
}

// ---- The delivery worker's side ----------------------------------------------------------

/**
 * Endpoints that have something to deliver now and that nobody is delivering to: active, not
 * waiting for a retry, not leased, with a change of a subscribed type after their cursor; with
 * the state they were found in (the end of a lease that ran out, or `none`, and the cursor),
 * which names the sweep's job (triggers.ts).
 * Reads across tenants (the worker's role bypasses RLS).
 */
export async function dueEndpoints(pool: DatabasePool, limit: number, onlyId?: string): Promise<Array<{ id: string; tenantId: string; stateSeen: string }>> {
  const rows = await inFeedOrder(pool, (order) =>
    pool.any(sql.type(z.object({ id: z.string(), tenant_id: z.string(), state_seen: z.string() }))`
      select e.id::text, e.tenant_id::text,
             coalesce((extract(epoch from e.lease_until) * 1000)::bigint::text, 'none') || '-' || e.cursor_commit::text || '-' || e.cursor_prepare::text as state_seen
      from webhook_endpoints e
      where e.status = 'active' ${onlyId === undefined ? sql.fragment`` : sql.fragment`and e.id = ${onlyId}`}
        and (e.next_attempt_at is null or e.next_attempt_at <= now())
        and (e.lease_until is null or e.lease_until < now())
        and exists (
          select 1 from employee_changes c
          where c.tenant_id = e.tenant_id
            and ${order.after(sql.fragment`e.tenant_id`, sql.fragment`e.cursor_commit`, sql.fragment`e.cursor_prepare`)}
            and c.type = any(e.event_types))
      limit ${limit}
    `),
  );
  return rows.map((r) => ({ id: r.id, tenantId: r.tenant_id, stateSeen: r.state_seen }));
}

/** Takes the endpoint's delivery lease (one delivery in flight per endpoint), or null when someone holds it, or its retry is not due yet (its retry job or the sweep comes back then). */
export async function acquireLease(pool: DatabasePool, tenantId: string, id: string, token: string, leaseMs: number): Promise<EndpointRecord | null> {
  const row = await withTenant(pool, tenantId, (tx) =>
    tx.maybeOne(sql.type(endpointRow)`
      update webhook_endpoints set lease_token = ${token}, lease_until = now() + make_interval(secs => ${leaseMs / 1000})
      where tenant_id = ${tenantId} and id = ${id} and status = 'active' and (lease_until is null or lease_until < now())
        -- Not before its retry time, by the database's clock, as dueEndpoints decides it: a
        -- worker whose clock disagreed took the lease, found the retry not due by its own clock,
        -- let go, and its follow-up found the endpoint due again, over and over for the skew.
        and (next_attempt_at is null or next_attempt_at <= now())
      returning ${endpointColumns}
    `),
  );
  return row ? toEndpoint(row) : null;
}

/**
 * The lease as its holder sees it before each send: still its own (a replay revokes it, another
 * worker takes it once it ran out), and how long it has left. One primary-key read; across
 * tenants like the rest of the worker's side.
 */
export async function leaseState(pool: DatabasePool, tenantId: string, id: string, token: string): Promise<{ readonly ours: boolean; readonly leftMs: number }> {
  const row = await pool.maybeOne(sql.type(z.object({ ours: z.boolean(), left_ms: z.number() }))`
    select coalesce(lease_token = ${token}::uuid and lease_until > now(), false) as ours,
           coalesce(extract(epoch from lease_until - now()) * 1000, 0)::float8 as left_ms
    from webhook_endpoints where tenant_id = ${tenantId} and id = ${id}
  `);
  return { ours: row?.ours ?? false, leftMs: row?.left_ms ?? 0 };
}

/** Lets the lease go: the holder's own, or the revoked form a replay left it (rewindEndpoint). */
export async function releaseLease(pool: DatabasePool, tenantId: string, id: string, token: string): Promise<void> {
  await withTenant(pool, tenantId, (tx) =>
    tx.query(sql.type(z.object({}))`
      update webhook_endpoints set lease_token = null, lease_until = null
      where tenant_id = ${tenantId} and id = ${id} and lease_token in (${token}::uuid, ${revoked(token)})
    `),
  );
}

export type AttemptRecord = {
  readonly change: { readonly position: GlobalPosition; readonly type: string };
  readonly statusCode: number | null;
  readonly error: string | null;
  /**
   * What the endpoint becomes: moved past the change, retrying it `delayMs` from now (the
   * database's now, the clock that decides when it is due), or disabled.
   */
  readonly outcome:
    | { readonly kind: 'delivered' }
    | { readonly kind: 'retry'; readonly failedAttempts: number; readonly delayMs: number }
    | { readonly kind: 'disable'; readonly reason: string };
};

/**
 * Records one attempt and moves the endpoint accordingly, in one transaction, only while the
 * lease is ours (false: it was lost, and whoever holds it now carries on).
 */
export async function recordAttempt(pool: DatabasePool, tenantId: string, id: string, token: string, attempt: AttemptRecord): Promise<boolean> {
  const { change, outcome } = attempt;
  const commit = change.position.commit.toString();
  const prepare = change.position.prepare.toString();
  return withTenant(pool, tenantId, async (tx) => {
    const moved = await tx.maybeOne(sql.type(z.object({ id: z.string() }))`
      update webhook_endpoints set
        cursor_commit = case when ${outcome.kind} = 'delivered' then ${commit}::numeric else cursor_commit end,
        cursor_prepare = case when ${outcome.kind} = 'delivered' then ${prepare}::numeric else cursor_prepare end,
        failed_attempts = ${outcome.kind === 'retry' ? outcome.failedAttempts : 0},
        next_attempt_at = ${outcome.kind === 'retry' ? sql.fragment`now() + make_interval(secs => ${outcome.delayMs / 1000})` : sql.fragment`null::timestamptz`},
        retrying_since = ${outcome.kind === 'retry' ? sql.fragment`case when failed_attempts = 0 then now() else coalesce(retrying_since, now()) end` : sql.fragment`null`},
        status = case when ${outcome.kind} = 'disable' then 'disabled' else status end,
        disabled_reason = ${outcome.kind === 'disable' ? outcome.reason : null}
      where tenant_id = ${tenantId} and id = ${id} and lease_token = ${token}
      returning id::text
    `);
    if (!moved) return false;
    const status = outcome.kind === 'delivered' ? 'succeeded' : outcome.kind === 'retry' ? 'retrying' : 'failed';
    await tx.query(sql.type(z.object({}))`
      insert into webhook_deliveries as d (endpoint_id, tenant_id, commit_position, prepare_position, type, status, attempts,
        last_status_code, last_error, last_attempt_at, next_attempt_at)
      values (${id}, ${tenantId}, ${commit}, ${prepare}, ${change.type}, ${status}, 1, ${attempt.statusCode}, ${attempt.error}, now(),
        ${outcome.kind === 'retry' ? sql.fragment`now() + make_interval(secs => ${outcome.delayMs / 1000})` : sql.fragment`null::timestamptz`})
      on conflict (endpoint_id, commit_position, prepare_position) do update set
        status = excluded.status, attempts = d.attempts + 1, last_status_code = excluded.last_status_code,
        last_error = excluded.last_error, last_attempt_at = excluded.last_attempt_at, next_attempt_at = excluded.next_attempt_at
    `);
    return true;
  });
}

/**
 * Records a run of successful deliveries and moves the cursor past the last, in one
 * transaction, only while the lease is ours. Batching these is safe for at-least-once: a crash
 * before this commits only means those changes are delivered again (same `webhook-id`).
 */
export async function recordDelivered(
  pool: DatabasePool,
  tenantId: string,
  id: string,
  token: string,
  delivered: ReadonlyArray<{ readonly position: GlobalPosition; readonly type: string; readonly statusCode: number; readonly at: Date }>,
  /** Extends the lease by this much from now (a long run of deliveries keeps it). */
  leaseMs: number,
): Promise<boolean> {
  const last = delivered.at(-1);
  return withTenant(pool, tenantId, async (tx) => {
    const moved = await tx.maybeOne(sql.type(z.object({ id: z.string() }))`
      update webhook_endpoints set
        cursor_commit = ${last ? sql.fragment`${last.position.commit.toString()}::numeric` : sql.fragment`cursor_commit`},
        cursor_prepare = ${last ? sql.fragment`${last.position.prepare.toString()}::numeric` : sql.fragment`cursor_prepare`},
        failed_attempts = ${last ? sql.fragment`0` : sql.fragment`failed_attempts`},
        next_attempt_at = ${last ? sql.fragment`null` : sql.fragment`next_attempt_at`},
        retrying_since = ${last ? sql.fragment`null` : sql.fragment`retrying_since`},
        lease_until = now() + make_interval(secs => ${leaseMs / 1000})
      where tenant_id = ${tenantId} and id = ${id} and lease_token = ${token}
      returning id::text
    `);
    if (!moved) return false;
    if (!last) return true;
    await tx.query(sql.type(z.object({}))`
      insert into webhook_deliveries as d (endpoint_id, tenant_id, commit_position, prepare_position, type, status, attempts,
        last_status_code, last_error, last_attempt_at, next_attempt_at)
      select ${id}, ${tenantId}, t.commit_position, t.prepare_position, t.type, 'succeeded', 1, t.status_code, null, t.at, null
      from ${sql.unnest(
        delivered.map((d) => [d.position.commit.toString(), d.position.prepare.toString(), d.type, d.statusCode, d.at.toISOString()]),
        ['numeric', 'numeric', 'text', 'int4', 'timestamptz'],
      )} as t(commit_position, prepare_position, type, status_code, at)
      on conflict (endpoint_id, commit_position, prepare_position) do update set
        status = 'succeeded', attempts = d.attempts + 1, last_status_code = excluded.last_status_code,
        last_error = null, last_attempt_at = excluded.last_attempt_at, next_attempt_at = null
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
    const result = await pool.query(sql.type(z.object({}))`
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
