-- migrate: no-transaction
-- The readers' order (transaction_id, position) becomes unique, built without
-- blocking appends; a build interrupted halfway is dropped and built again.
drop index concurrently if exists es_events_global_order_key;
create unique index concurrently es_events_global_order_key on es_events (transaction_id, position) include (type);
