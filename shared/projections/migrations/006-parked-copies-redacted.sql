-- Whether a parked copy's personal fields were blanked for an erasure (parked so, or blanked
-- since): a retry hands it back redacted, as the sealing boundary hands an erased person's event,
-- so that a projection applies it as erased rather than writing the blanks as values.
    alter table projection_parked_events add column redacted boolean not null default false;
