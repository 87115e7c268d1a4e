import { z } from 'zod';
import type { ValueExpression } from 'slonik';
import { ignoredRows, sql, withTenant, type DatabasePool } from '../../shared/db/pool.ts';
import type { GlobalPosition } from '../../shared/event-store/port.ts';
import { changeWithin, inFeedOrder, type FeedOrder } from '../../projections/changes/queries.ts';
import { ALWAYS_DELIVERED, endpointColumns, endpointRow, toEndpoint, type EndpointRecord } from './endpoints.ts';

/**
 * The delivery lease: one delivery in flight per endpoint. Who has work and no holder, taking
 * and letting go of the lease, and a replay's revocation of it.
 */
/**
 * A lease revoked by a replay: the holder's token with its UUID version digit set to 0. Live
 * tokens are random v4 UUIDs, so a revoked one never equals a live one, revoking twice gives the
 * same value, and the holder, which knows its own token, can still release it (releaseLease).
 */
const revoked = (token: ValueExpression) => sql.fragment`overlay(${token}::text placing '0' from 15 for 1)::uuid`;

const rewoundRow = endpointRow.extend({ handing_over: z.boolean() });

/**
 * Replay: move the endpoint back (or forward) to `cursor`, re-activate it, forget its retry state.
 *
 * A run delivering to the endpoint at this moment must neither move the cursor past the rewind
 * nor go on sending from the old cursor, and no second run may start while its attempt is still
 * in flight (one delivery in flight per endpoint). So the lease is not cleared but revoked: its
 * token becomes the revoked form (the holder's recordDelivered/recordAttempt then match nothing,
 * and the check it makes before every send, `readBeforeSend`, says it is no longer its), while
 * `lease_until` stays, so acquireLease refuses everyone else until the holder releases it
 * (releaseLease matches the revoked form) after its attempt in flight, or the lease runs out if
 * the holder died. `handingOver` tells the caller to wait for that (`leaseRevoked`). A lease
 * already run out is cleared.
 */
export async function rewindEndpoint(
  pool: DatabasePool,
  tenantId: string,
  id: string,
  cursor: GlobalPosition,
): Promise<(EndpointRecord & { readonly handingOver: boolean }) | null> {
  const row = await withTenant(pool, tenantId, (tx) =>
    tx.maybeOne(sql.type(rewoundRow)`
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

const revokedRow = z.object({ revoked: z.boolean() });

/** Whether a replay's revoked lease is still held (its holder has not released it and it has not run out). */
export async function leaseRevoked(pool: DatabasePool, tenantId: string, id: string): Promise<boolean> {
  const row = await withTenant(pool, tenantId, (tx) =>
    tx.maybeOne(sql.type(revokedRow)`
      select coalesce(lease_token = ${revoked(sql.fragment`lease_token`)} and lease_until >= now(), false) as revoked
      from webhook_endpoints where tenant_id = ${tenantId} and id = ${id}
    `),
  );
  return row?.revoked ?? false;
}

/**
 * How many changes after an endpoint's cursor the sweep and a delivery run look at: an endpoint
 * filtering rare types is due once this many others piled up after its cursor, and its run moves
 * the cursor past them, so neither ever reads more than this, however long the history it skips.
 */
export const SCAN_WINDOW = 1_000;

/**
 * A tenant's endpoints, longest waiting for a lease first: never leased, then by when they last
 * took one, then as registered. Without it the first registered would take every free slot of
 * the tenant's share while a later one's backlog waited. As SQL over the table aliased `alias`;
 * the same key in dueEndpoints and acquireLease, so both agree on who is next.
 */
const waitOrder = (alias: string) => {
  const e = sql.identifier([alias]);
  return sql.fragment`coalesce(${e}.last_leased_at, '-infinity'::timestamptz), ${e}.created_at, ${e}.id`;
};

/** SQL that holds when endpoint `alias` (a row of the table) has something to deliver now and no lease holder. */
const dueNow = (order: FeedOrder, alias: string, scanWindow: number) => {
  const e = sql.identifier([alias]);
  return sql.fragment`${e}.status = 'active'
          and (${e}.next_attempt_at is null or ${e}.next_attempt_at <= now())
          and (${e}.lease_until is null or ${e}.lease_until < now())
          and ${changeWithin(order, sql.fragment`${e}.tenant_id`, sql.fragment`${e}.cursor_commit`, sql.fragment`${e}.cursor_prepare`, sql.fragment`array_append(${e}.event_types, ${ALWAYS_DELIVERED}::text)`, scanWindow)}`;
};

const dueRow = z.object({ id: z.string(), tenant_id: z.string(), state_seen: z.string() });

/**
 * Endpoints that have something to deliver now and that nobody is delivering to: active, not
 * waiting for a retry, not leased, with a change of a subscribed type among the next
 * SCAN_WINDOW after their cursor, or SCAN_WINDOW changes of other types to move past; with
 * the state they were found in (the end of a lease that ran out, or `none`, and the cursor),
 * which names the sweep's job (triggers.ts).
 *
 * In turns across tenants: every tenant's first due endpoint, then every tenant's second, and
 * so on (tenants in a random order within a turn), so the jobs a sweep adds, which the queue
 * runs in that order, do not put one tenant's many endpoints ahead of everyone else's. A
 * tenant's own endpoints come longest waiting first (`waitOrder`). Reads across tenants (the
 * worker's role bypasses RLS).
 */
export async function dueEndpoints(
  pool: DatabasePool,
  limit: number,
  /** One endpoint (its id), or one tenant's. */
  only?: string | { readonly tenantId: string },
  /** How many changes after its cursor an endpoint's check looks at (SCAN_WINDOW). */
  scanWindow = SCAN_WINDOW,
): Promise<Array<{ id: string; tenantId: string; stateSeen: string }>> {
  const scope =
    only === undefined
      ? sql.fragment``
      : typeof only === 'string'
        ? sql.fragment`and e.id = ${only}`
        : sql.fragment`and e.tenant_id = ${only.tenantId}`;
  const rows = await inFeedOrder(pool, (order) =>
    pool.any(sql.type(dueRow)`
      select d.id, d.tenant_id, d.state_seen from (
        select e.id::text, e.tenant_id::text,
               coalesce((extract(epoch from e.lease_until) * 1000)::bigint::text, 'none') || '-' || e.cursor_commit::text || '-' || e.cursor_prepare::text as state_seen,
               row_number() over (partition by e.tenant_id order by ${waitOrder('e')}) as turn
        from webhook_endpoints e
        where ${dueNow(order, 'e', scanWindow)} ${scope}
      ) d
      order by d.turn, random()
      limit ${limit}
    `),
  );
  return rows.map((r) => ({ id: r.id, tenantId: r.tenant_id, stateSeen: r.state_seen }));
}

/**
 * Takes the endpoint's delivery lease (one delivery in flight per endpoint), or null when someone
 * holds it, its retry is not due yet (its retry job or the sweep comes back then), or its tenant
 * already holds `tenantShare` leases: a tenant's share of the deliveries in flight, across every
 * worker, so that its slow receivers cannot hold every slot (the endpoint waits for one of its
 * tenant's runs to end, which looks for it, or for the sweep).
 *
 * Within the share, the tenant's endpoints take turns: the lease goes to this endpoint only if
 * fewer of its due, unleased siblings have waited longer (`waitOrder`) than there are free slots.
 * Else a run that let go and asked for itself again would win back the slot it just freed before
 * the sibling it queued ahead of itself got there, and an endpoint registered late would wait for
 * every backlog before it. The refused one is queued again by the next run of its tenant to end
 * (dueEndpoints lists it first) or found by the sweep.
 */
export async function acquireLease(
  pool: DatabasePool,
  tenantId: string,
  id: string,
  token: string,
  leaseMs: number,
  tenantShare = Number.POSITIVE_INFINITY,
  /** How many changes after a sibling's cursor its due check looks at (SCAN_WINDOW). */
  scanWindow = SCAN_WINDOW,
): Promise<EndpointRecord | null> {
  const bounded = Number.isFinite(tenantShare);
  const row = await inFeedOrder(pool, (order) =>
    withTenant(pool, tenantId, async (tx) => {
      // The tenant's takers one at a time, so that the counts below still hold when the lease is taken.
      if (bounded) await tx.query(sql.type(ignoredRows)`select pg_advisory_xact_lock(hashtext(${`webhook-tenant:${tenantId}`}))::text`);
      const held = sql.fragment`(select count(*) from webhook_endpoints o
                 where o.tenant_id = ${tenantId} and o.id <> ${id} and o.lease_until >= now())`;
      return tx.maybeOne(sql.type(endpointRow)`
        update webhook_endpoints m set lease_token = ${token}, lease_until = now() + make_interval(secs => ${leaseMs / 1000}),
          last_leased_at = now()
        where m.tenant_id = ${tenantId} and m.id = ${id} and m.status = 'active' and (m.lease_until is null or m.lease_until < now())
          -- Not before its retry time, by the database's clock, as dueEndpoints decides it: a
          -- worker whose clock disagreed took the lease, found the retry not due by its own clock,
          -- let go, and its follow-up found the endpoint due again, over and over for the skew.
          and (m.next_attempt_at is null or m.next_attempt_at <= now())
          ${
            bounded
              ? sql.fragment`and ${held} < ${tenantShare}
          and (select count(*) from (
                 select 1 from webhook_endpoints s
                 where s.tenant_id = ${tenantId} and s.id <> ${id} and (${waitOrder('s')}) < (${waitOrder('m')})
                   and ${dueNow(order, 's', scanWindow)}
                 limit ${tenantShare}) ahead) < ${tenantShare} - ${held}`
              : sql.fragment``
          }
        returning ${endpointColumns}
      `);
    }),
  );
  return row ? toEndpoint(row) : null;
}

/** Lets the lease go: the holder's own, or the revoked form a replay left it (rewindEndpoint). */
export async function releaseLease(pool: DatabasePool, tenantId: string, id: string, token: string): Promise<void> {
  await withTenant(pool, tenantId, (tx) =>
    tx.query(sql.type(ignoredRows)`
      update webhook_endpoints set lease_token = null, lease_until = null
      where tenant_id = ${tenantId} and id = ${id} and lease_token in (${token}::uuid, ${revoked(token)})
    `),
  );
}
