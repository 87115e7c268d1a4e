-- The read horizon as PL/pgSQL, which keeps its plan for the connection's life
-- (a LANGUAGE sql function that reads pg_locks is planned again on every call).
      create or replace function es_read_horizon() returns xid8 language plpgsql volatile as $fn$
      begin
        return (select coalesce(
          (select min(x) from pg_snapshot_xip(snap.s) x
           where (x::text::bigint % 4294967296) in (
             select l2.transactionid::text::bigint
             from pg_locks l1
             join pg_locks l2 on l2.pid = l1.pid and l2.locktype = 'transactionid' and l2.mode = 'ExclusiveLock' and l2.granted
             where l1.locktype = 'relation'
               and l1.database = (select oid from pg_database where datname = current_database())
               and l1.relation in ('es_events'::regclass, 'es_streams'::regclass)
               and l1.pid <> pg_backend_pid())),
          pg_snapshot_xmax(snap.s))
        from (select pg_current_snapshot() as s) snap);
      end
      $fn$;
