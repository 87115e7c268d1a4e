-- The event log: one row per event, read in (transaction id, position) order,
-- and each stream's current revision.
      create table es_streams (
        stream_id text primary key,
        revision bigint not null
      );
      create table es_events (
        position bigint generated always as identity primary key,
        transaction_id xid8 not null default pg_current_xact_id(),
        stream_id text not null,
        revision bigint not null,
        event_id uuid not null unique,
        type text not null,
        data jsonb not null,
        metadata jsonb not null default '{}'::jsonb,
        recorded_at timestamptz not null default clock_timestamp(),
        unique (stream_id, revision)
      );
      create index es_events_global_order on es_events (transaction_id, position) include (type);
