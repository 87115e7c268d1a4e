import type { Migration } from '../../shared/db/migrate.ts';

const tenantScoped = (table: string) => `
  alter table ${table} enable row level security;
  alter table ${table} force row level security;
  create policy ${table}_tenant on ${table} using (tenant_id = current_setting('app.tenant_id', true)::uuid);
  grant select, insert, update, delete on ${table} to eas_tenant;
`;

/**
 * Usage rollups fed from the metrics bus (Kafka), outside the event store. The KPI consumer
 * writes them and `kpi_kafka_offsets` in one transaction. See docs/analytics.md for analysts.
 */
export const kpiMigrations: readonly Migration[] = [
  {
    id: 'kpi/001-usage-rollups',
    sql: `
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
      ${['kpi_usage_minutes', 'kpi_usage_hours', 'kpi_user_activity', 'kpi_daily_users', 'kpi_tenant_usage'].map(tenantScoped).join('\n')}
    `,
  },
];
