-- When the change being retried first failed: retries end 3 days after it, which a
-- count of retries alone did not bound.
alter table webhook_endpoints add column retrying_since timestamptz;
