-- Each delivery's latest attempts (when, status code, duration, error), oldest first, so a
-- receiver's first 500 stays visible once a retry succeeded. The code that appends bounds it;
-- it goes with its entry when the log is trimmed.
alter table webhook_deliveries add column attempt_log jsonb not null default '[]'::jsonb;
