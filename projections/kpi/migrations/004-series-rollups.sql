-- KPIs over time: distinct-user sketches per hour and a day level, so that a series
-- point reads one day row (or at most 24 hour rows) per window.
      alter table kpi_usage_hours add column users_sketch bytea, add column users integer;
      create table kpi_usage_days (
        tenant_id uuid not null,
        day timestamptz not null,
        samples bigint not null,
        errors bigint not null,
        duration_sum_ms double precision not null,
        latency_sketch bytea not null,
        users_sketch bytea,
        users integer,
        primary key (tenant_id, day)
      );
      
  alter table kpi_usage_days enable row level security;
  alter table kpi_usage_days force row level security;
  create policy kpi_usage_days_tenant on kpi_usage_days using (tenant_id = current_setting('app.tenant_id', true)::uuid);
  grant select, insert, update, delete on kpi_usage_days to eas_tenant;
