-- Each projection's position in the log, written in the transaction that applies
-- the page, so a replay never applies an event twice.
      create table projection_checkpoints (
        name text primary key,
        version integer not null,
        commit_position numeric(20, 0) not null,
        prepare_position numeric(20, 0) not null,
        events_applied bigint not null default 0,
        updated_at timestamptz not null default now()
      );
      grant select on projection_checkpoints to eas_tenant;
