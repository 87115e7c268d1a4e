-- One generic plan for the append and read functions: each statement is a lookup
-- by a unique key or a scan of the log's order, right whatever the arguments.
      alter function es_append_batch(int[], text[], text[], int[], uuid[], text[], jsonb[], jsonb[]) set plan_cache_mode = force_generic_plan;
      alter function es_append(text, text, uuid[], text[], jsonb[], jsonb[]) set plan_cache_mode = force_generic_plan;
      alter function es_read_page(xid8, bigint, int, text[], int) set plan_cache_mode = force_generic_plan;
