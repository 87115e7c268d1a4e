-- When each endpoint last took the delivery lease: a tenant's due endpoints take turns at its
-- share of the slots by it (the longest waiting first), not in the order they were registered.
alter table webhook_endpoints add column last_leased_at timestamptz;
