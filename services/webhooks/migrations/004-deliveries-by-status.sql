-- migrate: no-transaction
-- The delivery log filtered by status (`?status=failed`, `retrying`): those entries are few
-- among an endpoint's successes, so they get an index of their own, built without blocking
-- deliveries; a build interrupted halfway is dropped and built again.
drop index concurrently if exists webhook_deliveries_unsettled;
create index concurrently webhook_deliveries_unsettled on webhook_deliveries (endpoint_id, status, last_attempt_at desc) where status <> 'succeeded';
