import { z } from 'zod';
import { idRow, ignoredRows, sql, withTenant, type DatabasePool } from '../../shared/db/pool.ts';
import { ConflictError } from '../../shared/errors.ts';
import type { GlobalPosition } from '../../shared/event-store/port.ts';

/** Webhook endpoints as the tenant manages them: their rows, and create, list, find, delete. */
export const endpointRow = z.object({
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

/**
 * Delivered to every endpoint, whatever it subscribed to: each change it was sent carried the
 * employee's personal data, and this is the change that asks it to erase them.
 */
export const ALWAYS_DELIVERED = 'employee.erased';

/** The change types an endpoint is sent: its subscription and `ALWAYS_DELIVERED`. */
export const deliveredTypes = (subscribed: readonly string[]): readonly string[] =>
  subscribed.includes(ALWAYS_DELIVERED) ? subscribed : [...subscribed, ALWAYS_DELIVERED];

export type EndpointRecord = {
  readonly id: string;
  readonly tenantId: string;
  readonly url: string;
  readonly eventTypes: readonly string[];
  readonly secretSealed: string;
  readonly status: 'active' | 'disabled';
  readonly disabledReason: string | null;
  readonly createdAt: string;
  /** The last change delivered, or a later one of a type it does not take (or the start position it was created/replayed at). */
  readonly cursor: GlobalPosition;
  readonly failedAttempts: number;
  readonly nextAttemptAt: string | null;
  /** When the change being retried first failed (null while nothing is retried). */
  readonly retryingSince: string | null;
};

export const toEndpoint = (r: z.infer<typeof endpointRow>): EndpointRecord => ({
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

export const endpointColumns = sql.fragment`
  id::text, tenant_id::text, url, event_types, secret_sealed, status, disabled_reason, created_at,
  cursor_commit::text, cursor_prepare::text, failed_attempts, next_attempt_at, retrying_since
`;

/** Endpoints a tenant may have: each is one delivery in flight at most, and the tenant's share of the worker's slots is bounded anyway. */
export const MAX_ENDPOINTS_PER_TENANT = 20;

/** Inserts the endpoint; a ConflictError (409) when the tenant already has `max` of them. */
export async function insertEndpoint(
  pool: DatabasePool,
  e: { id: string; tenantId: string; url: string; eventTypes: readonly string[]; secretSealed: string; cursor: GlobalPosition },
  max = MAX_ENDPOINTS_PER_TENANT,
): Promise<EndpointRecord> {
  return withTenant(pool, e.tenantId, async (tx) => {
    // Registrations of one tenant one at a time, so two at once cannot both pass the count.
    await tx.query(sql.type(ignoredRows)`select pg_advisory_xact_lock(hashtext(${`webhook-endpoints:${e.tenantId}`}))::text`);
    const row = await tx.maybeOne(sql.type(endpointRow)`
      insert into webhook_endpoints (id, tenant_id, url, event_types, secret_sealed, cursor_commit, cursor_prepare)
      select ${e.id}, ${e.tenantId}, ${e.url}, ${sql.array([...e.eventTypes], 'text')}, ${e.secretSealed},
             ${e.cursor.commit.toString()}, ${e.cursor.prepare.toString()}
      where (select count(*) from webhook_endpoints where tenant_id = ${e.tenantId}) < ${max}
      returning ${endpointColumns}
    `);
    if (!row) throw new ConflictError(`A tenant has at most ${max} webhook endpoints: delete one to register another`);
    return toEndpoint(row);
  });
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
    tx.maybeOne(sql.type(idRow)`delete from webhook_endpoints where tenant_id = ${tenantId} and id = ${id} returning id::text`),
  );
  return row !== null;
}

/** Replaces the sealed secret (sealed again under the current key), unless it changed meanwhile. */
export async function resealSecret(pool: DatabasePool, tenantId: string, id: string, from: string, to: string): Promise<boolean> {
  const row = await withTenant(pool, tenantId, (tx) =>
    tx.maybeOne(sql.type(idRow)`
      update webhook_endpoints set secret_sealed = ${to} where tenant_id = ${tenantId} and id = ${id} and secret_sealed = ${from}
      returning id::text
    `),
  );
  return row !== null;
}
