-- Events a projection failed to apply, parked where an operator sees them, so that
-- one bad event does not stall the projection.
    create table projection_parked_events (
      projection text not null,
      version integer not null,
      commit_position numeric(20, 0) not null,
      prepare_position numeric(20, 0) not null,
      event_id text not null,
      stream_id text not null,
      revision bigint not null,
      event_type text not null,
      tenant_id text,
      data jsonb not null,
      metadata jsonb not null,
      recorded_at timestamptz not null,
      error text not null,
      attempts integer not null,
      first_failed_at timestamptz not null default now(),
      last_failed_at timestamptz not null default now(),
      status text not null default 'parked' check (status in ('parked', 'retried', 'resolved')),
      resolved_at timestamptz,
      primary key (projection, version, event_id)
    );
    create index projection_parked_events_open on projection_parked_events (projection, version, stream_id) where status = 'parked';
