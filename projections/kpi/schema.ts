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
  {
    // For analysts: p-quantiles straight from a stored sketch (shared/sketch/ddsketch.ts, format 1),
    // e.g. p95 per hour = kpi_sketch_quantile(latency_sketch, 0.95) from kpi_usage_hours.
    id: 'kpi/002-sketch-quantile',
    sql: `
      create function kpi_sketch_varint(sketch bytea, pos integer, out value bigint, out next integer)
      language plpgsql immutable strict as $fn$
      declare
        b integer;
        scale bigint := 1;
      begin
        value := 0;
        next := pos;
        loop
          b := get_byte(sketch, next);
          next := next + 1;
          value := value + (b & 127) * scale;
          exit when b < 128;
          scale := scale * 128;
        end loop;
      end
      $fn$;

      create function kpi_sketch_quantile(sketch bytea, q double precision) returns double precision
      language plpgsql immutable strict as $fn$
      declare
        alpha constant double precision := 0.005;
        gamma constant double precision := (1 + alpha) / (1 - alpha);
        expected constant bytea := float8send(0.005::double precision);
        total bigint;
        zero bigint;
        bins bigint;
        pos integer;
        d bigint;
        c bigint;
        idx bigint := 0;
        seen bigint;
        rank bigint;
        r record;
      begin
        if q < 0 or q > 1 then raise exception 'q must be in [0, 1]'; end if;
        if get_byte(sketch, 0) <> 1 then raise exception 'unknown sketch format %', get_byte(sketch, 0); end if;
        for i in 0..7 loop -- stored little-endian; float8send is big-endian
          if get_byte(sketch, 1 + i) <> get_byte(expected, 7 - i) then raise exception 'sketch accuracy is not 0.005'; end if;
        end loop;
        r := kpi_sketch_varint(sketch, 9); total := r.value;
        r := kpi_sketch_varint(sketch, r.next); zero := r.value;
        pos := r.next + 24; -- sum, min, max (float8 each)
        r := kpi_sketch_varint(sketch, pos); bins := r.value; pos := r.next;
        if total = 0 then return null; end if;
        rank := floor(q * (total - 1));
        if rank < zero then return 0; end if;
        seen := zero;
        for i in 1..bins loop
          r := kpi_sketch_varint(sketch, pos); d := r.value;
          r := kpi_sketch_varint(sketch, r.next); c := r.value; pos := r.next;
          idx := idx + case when d % 2 = 0 then d / 2 else -(d + 1) / 2 end;
          seen := seen + c;
          if seen > rank then return 2 * power(gamma, idx) / (gamma + 1); end if;
        end loop;
        return null;
      end
      $fn$;
      grant execute on function kpi_sketch_quantile(bytea, double precision) to eas_tenant;
      grant execute on function kpi_sketch_varint(bytea, integer) to eas_tenant;
    `,
  },
  {
    // The usage watermark (KPI asOf): per partition, the newest sample timestamp applied, used
    // while the consumer is behind the topic's head (docs/analytics.md, "asOf").
    id: 'kpi/003-offsets-applied-until',
    sql: `alter table kpi_kafka_offsets add column applied_until timestamptz;`,
  },
  {
    // KPIs over time (SPEC §8): distinct-user sketches per hour and a day level, so a series
    // point reads one day row (or ≤ 24 hour rows) per window instead of minutes or raw users.
    // Rows written before this migration have no users_sketch (counted as no users); the day
    // level starts empty and fills from ingestion (replaying the usage topic rebuilds both).
    id: 'kpi/004-series-rollups',
    sql: `
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
      ${tenantScoped('kpi_usage_days')}
    `,
  },
];
