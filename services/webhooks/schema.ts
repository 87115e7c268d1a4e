import { tenantScopedDdl, type Migration } from '../../shared/db/migrate.ts';

/**
 * Webhook endpoints and their delivery log. An endpoint's position in the change feed (its
 * `cursor_*`: the last change delivered), its retry state and its delivery lease live here,
 * not in Redis: the BullMQ jobs are only triggers, re-created from these rows after Redis loses
 * them. Tenant-scoped with forced row-level security; the delivery worker reads across tenants,
 * so, like the projector, it needs a role that bypasses RLS (docs/operations.md).
 */
export const webhookMigrations: readonly Migration[] = [
  {
    id: 'webhooks/001-endpoints-deliveries',
    sql: `
      create table webhook_endpoints (
        id uuid primary key,
        tenant_id uuid not null,
        url text not null,
        event_types text[] not null,
        secret_sealed text not null,
        status text not null default 'active' check (status in ('active', 'disabled')),
        disabled_reason text,
        created_at timestamptz not null default now(),
        cursor_commit numeric(20, 0) not null,
        cursor_prepare numeric(20, 0) not null,
        failed_attempts integer not null default 0,
        next_attempt_at timestamptz,
        lease_token uuid,
        lease_until timestamptz
      );
      create index webhook_endpoints_tenant on webhook_endpoints (tenant_id, created_at);
      create index webhook_endpoints_due on webhook_endpoints (next_attempt_at) where status = 'active';
      ${tenantScopedDdl('webhook_endpoints')}

      create table webhook_deliveries (
        endpoint_id uuid not null references webhook_endpoints (id) on delete cascade,
        tenant_id uuid not null,
        commit_position numeric(20, 0) not null,
        prepare_position numeric(20, 0) not null,
        type text not null,
        status text not null check (status in ('retrying', 'succeeded', 'failed')),
        attempts integer not null,
        last_status_code integer,
        last_error text,
        last_attempt_at timestamptz not null,
        next_attempt_at timestamptz,
        primary key (endpoint_id, commit_position, prepare_position)
      );
      create index webhook_deliveries_recent on webhook_deliveries (endpoint_id, last_attempt_at desc);
      ${tenantScopedDdl('webhook_deliveries')}
    `,
  },
  // When the change being retried first failed: the retries end 3 days after it (SPEC §7), which
  // a count of retries alone did not bound (jitter, a receiver's Retry-After). Null while nothing
  // is being retried; an endpoint retrying at the upgrade counts from its next failure.
  { id: 'webhooks/002-retrying-since', sql: 'alter table webhook_endpoints add column retrying_since timestamptz;' },
];
