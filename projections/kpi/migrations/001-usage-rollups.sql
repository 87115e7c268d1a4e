-- Usage rollups fed from the metrics bus, outside the event store; the consumer
-- writes them and its Kafka offsets in one transaction.
      create table kpi_kafka_offsets (
        consumer_group text not null,
        topic text not null,
        partition integer not null,
        next_offset bigint not null,
        samples_applied bigint not null default 0,
        updated_at timestamptz not null default now(),
        primary key (consumer_group, topic, partition)
      );

      create table kpi_usage_minutes (
        tenant_id uuid not null,
        minute timestamptz not null,
        samples bigint not null,
        errors bigint not null,
        duration_sum_ms double precision not null,
        latency_sketch bytea not null,
        primary key (tenant_id, minute)
      );
      create table kpi_usage_hours (
        tenant_id uuid not null,
        hour timestamptz not null,
        samples bigint not null,
        errors bigint not null,
        duration_sum_ms double precision not null,
        latency_sketch bytea not null,
        primary key (tenant_id, hour)
      );
      create table kpi_user_activity (
        tenant_id uuid not null,
        user_id text not null,
        first_seen timestamptz not null,
        last_seen timestamptz not null,
        primary key (tenant_id, user_id)
      );
      create index kpi_user_activity_last_seen on kpi_user_activity (tenant_id, last_seen);
      create table kpi_daily_users (
        tenant_id uuid not null,
        day date not null,
        user_id text not null,
        samples bigint not null,
        primary key (tenant_id, day, user_id)
      );
      create table kpi_tenant_usage (
        tenant_id uuid primary key,
        samples bigint not null,
        last_sample_at timestamptz not null
      );
      
  alter table kpi_usage_minutes enable row level security;
  alter table kpi_usage_minutes force row level security;
  create policy kpi_usage_minutes_tenant on kpi_usage_minutes using (tenant_id = current_setting('app.tenant_id', true)::uuid);
  grant select, insert, update, delete on kpi_usage_minutes to eas_tenant;


  alter table kpi_usage_hours enable row level security;
  alter table kpi_usage_hours force row level security;
  create policy kpi_usage_hours_tenant on kpi_usage_hours using (tenant_id = current_setting('app.tenant_id', true)::uuid);
  grant select, insert, update, delete on kpi_usage_hours to eas_tenant;


  alter table kpi_user_activity enable row level security;
  alter table kpi_user_activity force row level security;
  create policy kpi_user_activity_tenant on kpi_user_activity using (tenant_id = current_setting('app.tenant_id', true)::uuid);
  grant select, insert, update, delete on kpi_user_activity to eas_tenant;


  alter table kpi_daily_users enable row level security;
  alter table kpi_daily_users force row level security;
  create policy kpi_daily_users_tenant on kpi_daily_users using (tenant_id = current_setting('app.tenant_id', true)::uuid);
  grant select, insert, update, delete on kpi_daily_users to eas_tenant;


  alter table kpi_tenant_usage enable row level security;
  alter table kpi_tenant_usage force row level security;
  create policy kpi_tenant_usage_tenant on kpi_tenant_usage using (tenant_id = current_setting('app.tenant_id', true)::uuid);
  grant select, insert, update, delete on kpi_tenant_usage to eas_tenant;
