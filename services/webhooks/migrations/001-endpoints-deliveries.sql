-- Webhook endpoints (their position in the change feed, retry state and lease) and
-- their delivery log, in PostgreSQL: the queue's jobs are only triggers.
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
      
  alter table webhook_endpoints enable row level security;
  alter table webhook_endpoints force row level security;
  create policy webhook_endpoints_tenant_isolation on webhook_endpoints
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)
    with check (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
  grant select, insert, update, delete on webhook_endpoints to eas_tenant;


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
      
  alter table webhook_deliveries enable row level security;
  alter table webhook_deliveries force row level security;
  create policy webhook_deliveries_tenant_isolation on webhook_deliveries
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)
    with check (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
  grant select, insert, update, delete on webhook_deliveries to eas_tenant;
