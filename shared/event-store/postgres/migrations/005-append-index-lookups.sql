-- Every table access of the append functions is a lookup by a unique key: tell the
-- planner, so that a plan cached while the tables were small never scans them.
      alter function es_append_batch(int[], text[], text[], int[], uuid[], text[], jsonb[], jsonb[]) set enable_seqscan = off;
      alter function es_append(text, text, uuid[], text[], jsonb[], jsonb[]) set enable_seqscan = off;
