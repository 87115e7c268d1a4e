-- A page of the log in one round trip: the read horizon, the scan window and the
-- fetch in one function, the horizon taken strictly before the rows are read.
      create function es_read_horizon() returns xid8 language sql volatile as $fn$
        select coalesce(
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
        from (select pg_current_snapshot() as s) snap
      $fn$;

      create function es_read_page(p_after_commit xid8, p_after_prepare bigint, p_max int, p_types text[], p_window int)
      returns table (id text, stream_id text, revision bigint, type text, data jsonb, metadata jsonb, commit text, prepare bigint, recorded_at timestamptz)
      language plpgsql volatile
      -- Generic plans are cached per connection; planned on an empty table they would scan it.
      set enable_seqscan = off
      as $fn$
      declare
        v_horizon xid8 := es_read_horizon();
        v_end_commit xid8;
        v_end_prepare bigint;
        v_scanned bigint;
      begin
        if p_types is null then
          return query
            select e.event_id::text, e.stream_id, e.revision, e.type, e.data, e.metadata, e.transaction_id::text, e.position, e.recorded_at
            from es_events e
            where (e.transaction_id, e.position) > (p_after_commit, p_after_prepare) and e.transaction_id < v_horizon
            order by e.transaction_id, e.position limit p_max;
          return;
        end if;
        select w.transaction_id, w.position, w.n into v_end_commit, v_end_prepare, v_scanned from (
          select e.transaction_id, e.position, row_number() over (order by e.transaction_id, e.position) as n from es_events e
          where (e.transaction_id, e.position) > (p_after_commit, p_after_prepare) and e.transaction_id < v_horizon
          order by e.transaction_id, e.position limit p_window
        ) w order by w.transaction_id desc, w.position desc limit 1;
        if v_end_commit is null then return; end if;
        return query
          select e.event_id::text, e.stream_id, e.revision, e.type, e.data, e.metadata, e.transaction_id::text, e.position, e.recorded_at
          from es_events e
          where (e.transaction_id, e.position) > (p_after_commit, p_after_prepare)
            and (e.transaction_id, e.position) <= (v_end_commit, v_end_prepare)
            and e.type = any(p_types)
          order by e.transaction_id, e.position limit p_max;
        return query select null::text, null::text, null::bigint, null::text, null::jsonb, null::jsonb, v_end_commit::text, v_end_prepare, null::timestamptz;
      end
      $fn$;
