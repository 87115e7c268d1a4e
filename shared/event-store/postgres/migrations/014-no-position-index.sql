-- The unique order index takes the old one's place and the position index goes: no
-- query reads by it, and every event paid an entry in it.
      set local lock_timeout = '10s';
      drop index es_events_global_order;
      alter index es_events_global_order_key rename to es_events_global_order;
      alter table es_events replica identity using index es_events_stream_id_revision_key;
      alter table es_events drop constraint es_events_pkey;
