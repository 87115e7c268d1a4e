-- Streams whose parked events are kept without some fields (their person was erased), so that
-- an event of theirs parked later, opened on a page read before the erasure, is parked without
-- them too.
    create table projection_parked_redactions (
      stream_id text primary key,
      fields text[] not null,
      redacted_at timestamptz not null default now()
    );
