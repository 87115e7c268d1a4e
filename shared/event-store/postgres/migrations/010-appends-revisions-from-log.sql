-- The appends read a stream's revision from the log and stop writing es_streams;
-- first checks that es_streams agrees with the log. The horizon watches es_events alone.
      do $check$
      declare v_disagree bigint; v_example text;
      begin
        select count(*), min(coalesce(s.stream_id, e.stream_id)) into v_disagree, v_example
          from es_streams s
          full join (select stream_id, max(revision) as revision from es_events group by stream_id) e using (stream_id)
          where s.revision is distinct from e.revision;
        if v_disagree > 0 then
          raise exception 'es_streams disagrees with es_events on % stream(s), e.g. %', v_disagree, v_example
            using hint = 'A stream''s revision must be the newest revision of its events; fix the rows written outside the event store, then start again.';
        end if;
      end
      $check$;

      create or replace function es_append_batch(
        p_req int[], p_stream text[], p_expected text[], p_count int[],
        p_ids uuid[], p_types text[], p_data jsonb[], p_metadata jsonb[]
      ) returns table (outcomes text[], revisions bigint[], commits text[], prepares bigint[])
      language plpgsql
      set enable_seqscan = off
      set plan_cache_mode = force_generic_plan
      as $fn$
      declare
        n_parts int := coalesce(cardinality(p_stream), 0);
        n_events int := coalesce(cardinality(p_ids), 0);
        v_locks bigint[]; v_distinct boolean; v_fresh boolean;
        s_names text[]; s_revs bigint[]; s_dirty boolean[];
        x_ids uuid[]; x_streams text[]; x_revs bigint[];
        e_part int[] := array_fill(null::int, array[n_events]);
        e_stream text[] := array_fill(null::text, array[n_events]);
        e_rev bigint[] := array_fill(null::bigint, array[n_events]);
        first_event int[] := array_fill(null::int, array[n_parts]);
        o_out text[] := array_fill(null::text, array[n_parts]);
        o_rev bigint[] := array_fill(null::bigint, array[n_parts]);
        o_dup uuid[] := array_fill(null::uuid, array[n_parts]);
        o_commit text[] := array_fill(null::text, array[n_parts]);
        o_prep bigint[] := array_fill(null::bigint, array[n_parts]);
        v_ins_ids uuid[]; v_ins_pos bigint[]; v_first bigint[];
        v_offset int := 1;
        v_p int; v_q int; v_end int; v_e int; v_k int; v_s int;
        v_cur bigint; v_exp text; v_found int; v_foreign int; v_dup_rev bigint; v_dup_id uuid;
        v_ok boolean; v_any_insert boolean := false; v_any_dup boolean := false;
        v_repeats boolean;
        v_xid text; v_row record;
      begin
        select (select coalesce(array_agg(k.h order by k.h), '{}') from (select distinct hashtextextended(s, 0) as h from unnest(p_stream) s) k),
               (select count(distinct x) from unnest(p_ids) x) < n_events,
               (select count(distinct s) from unnest(p_stream) s) = n_parts
          into v_locks, v_repeats, v_distinct;
        -- Every stream of the batch locked in one order shared by all writers (no deadlock
        -- between gateways flushing at once), before the transaction draws its id: global
        -- order follows the per-stream lock order (see the adapter's header). unnest keeps the
        -- array's order, and the statements below take their snapshots after this one.
        perform pg_advisory_xact_lock(l.h) from unnest(v_locks) as l(h);
        if not v_repeats and v_distinct then
          select not exists (select 1 from es_events e where e.event_id = any(p_ids)),
                 coalesce(array_agg(d.outcome order by d.part), '{}'), coalesce(array_agg(d.rev order by d.part), '{}'),
                 coalesce(array_agg(d.first_rev order by d.part), '{}'), coalesce(array_agg(d.fe order by d.part), '{}')
            into v_fresh, o_out, o_rev, v_first, first_event
            from (
              select c.part, c.fe,
                case when c.req_ok then 'appended' when c.ok then 'not_attempted' else 'wrong_expected_revision' end as outcome,
                case when c.req_ok then c.cur + c.cnt when c.ok then null else nullif(c.cur, -1) end as rev,
                case when c.req_ok then c.cur + 1 end as first_rev
              from (
                select k.*, bool_and(k.ok) over (partition by k.req) as req_ok from (
                  select p.n as part, p.req, p.cnt, (sum(p.cnt) over (order by p.n) - p.cnt + 1)::int as fe,
                    coalesce(st.revision, -1) as cur,
                    coalesce(case p.expected
                      when 'any' then true
                      when 'no_stream' then st.revision is null
                      when 'stream_exists' then st.revision is not null
                      else case when p.expected ~ '^[0-9]+$' then st.revision = p.expected::bigint else false end
                    end, false) as ok
                  from unnest(p_req, p_stream, p_expected, p_count) with ordinality as p(req, stream, expected, cnt, n)
                  left join lateral (select max(x.revision) as revision from es_events x where x.stream_id = p.stream) st on true
                ) k
              ) c
            ) d;
          if v_fresh then
            if 'appended' = any(o_out) then
              with inserted as (
                insert into es_events (stream_id, revision, event_id, type, data, metadata)
                select pp.stream, pp.first_rev + (e.n - pp.fe), e.id, e.type, e.data, coalesce(e.metadata, '{}'::jsonb)
                from unnest(p_ids, p_types, p_data, p_metadata) with ordinality as e(id, type, data, metadata, n)
                join (select t.stream, t.first_rev, t.fe, t.fe + t.cnt - 1 as le
                      from unnest(p_stream, v_first, first_event, p_count) as t(stream, first_rev, fe, cnt)
                      where t.first_rev is not null) pp on e.n between pp.fe and pp.le
                order by e.n
                returning es_events.event_id, es_events.position
              )
              select coalesce(array_agg(li.position order by t.n), '{}'),
                     coalesce(array_agg(case when t.outcome = 'appended' then pg_current_xact_id()::text end order by t.n), '{}')
                into o_prep, o_commit
                from unnest(o_out, first_event, p_count) with ordinality as t(outcome, fe, cnt, n)
                left join inserted li on t.outcome = 'appended' and li.event_id = p_ids[t.fe + t.cnt - 1];
            end if;
            outcomes := o_out; revisions := o_rev; commits := o_commit; prepares := o_prep;
            return next;
            return;
          end if;
          -- An id is in the log already (a retry): decided again below, request by request.
          o_out := array_fill(null::text, array[n_parts]);
          o_rev := array_fill(null::bigint, array[n_parts]);
        end if;

        select coalesce(array_agg(u.s), '{}'), coalesce(array_agg(coalesce(st.revision, -1)), '{}'), coalesce(array_agg(false), '{}')
          into s_names, s_revs, s_dirty
          from (select distinct s from unnest(p_stream) s) u left join lateral (select max(x.revision) as revision from es_events x where x.stream_id = u.s) st on true;
        select coalesce(array_agg(e.event_id), '{}'), coalesce(array_agg(e.stream_id), '{}'), coalesce(array_agg(e.revision), '{}')
          into x_ids, x_streams, x_revs
          from es_events e where e.event_id = any(p_ids);
        for v_p in 1..n_parts loop
          first_event[v_p] := v_offset;
          for v_e in v_offset .. v_offset + p_count[v_p] - 1 loop e_part[v_e] := v_p; e_stream[v_e] := p_stream[v_p]; end loop;
          v_offset := v_offset + p_count[v_p];
        end loop;

        v_p := 1;
        while v_p <= n_parts loop
          v_end := v_p;
          while v_end < n_parts and p_req[v_end + 1] = p_req[v_p] loop v_end := v_end + 1; end loop;
          v_ok := true;
          for v_q in v_p .. v_end loop
            v_s := array_position(s_names, p_stream[v_q]);
            v_found := 0; v_foreign := 0; v_dup_rev := null; v_dup_id := null;
            for v_e in first_event[v_q] .. first_event[v_q] + p_count[v_q] - 1 loop
              v_k := array_position(x_ids, p_ids[v_e]);
              if v_k is not null then
                v_found := v_found + 1;
                if x_streams[v_k] <> p_stream[v_q] then v_foreign := v_foreign + 1;
                elsif v_dup_rev is null or x_revs[v_k] > v_dup_rev then v_dup_rev := x_revs[v_k]; v_dup_id := p_ids[v_e];
                end if;
              elsif v_repeats then
                -- Appended earlier in this batch (only looked for when the batch repeats an id)?
                select k into v_k from unnest(array_positions(p_ids, p_ids[v_e])) k
                  where k < first_event[v_q] and e_rev[k] is not null limit 1;
                if v_k is not null then
                  v_found := v_found + 1;
                  if p_stream[e_part[v_k]] <> p_stream[v_q] then v_foreign := v_foreign + 1;
                  elsif v_dup_rev is null or e_rev[v_k] > v_dup_rev then v_dup_rev := e_rev[v_k]; v_dup_id := p_ids[v_e];
                  end if;
                end if;
              end if;
            end loop;
            if v_found > 0 then
              if v_found = p_count[v_q] and v_foreign = 0 then
                o_out[v_q] := 'duplicate'; o_rev[v_q] := v_dup_rev; o_dup[v_q] := v_dup_id;
              else
                o_out[v_q] := 'event_id_conflict'; v_ok := false;
              end if;
              continue;
            end if;
            v_cur := s_revs[v_s];
            v_exp := p_expected[v_q];
            if not (v_exp = 'any'
                    or (v_exp = 'no_stream' and v_cur < 0)
                    or (v_exp = 'stream_exists' and v_cur >= 0)
                    or (v_exp ~ '^[0-9]+$' and v_cur = v_exp::bigint)) then
              o_out[v_q] := 'wrong_expected_revision';
              o_rev[v_q] := case when v_cur < 0 then null else v_cur end;
              v_ok := false;
              continue;
            end if;
            o_out[v_q] := 'appended';
            o_rev[v_q] := v_cur + p_count[v_q];
          end loop;

          for v_q in v_p .. v_end loop
            if not v_ok then
              if o_out[v_q] in ('appended', 'duplicate') then o_out[v_q] := 'not_attempted'; o_rev[v_q] := null; o_dup[v_q] := null; end if;
            elsif o_out[v_q] = 'appended' then
              v_s := array_position(s_names, p_stream[v_q]);
              for v_e in first_event[v_q] .. first_event[v_q] + p_count[v_q] - 1 loop
                s_revs[v_s] := s_revs[v_s] + 1;
                e_rev[v_e] := s_revs[v_s];
              end loop;
              s_dirty[v_s] := true;
              v_any_insert := true;
            elsif o_out[v_q] = 'duplicate' then
              v_any_dup := true;
            end if;
          end loop;
          v_p := v_end + 1;
        end loop;

        if v_any_insert then
          with inserted as (
            insert into es_events (stream_id, revision, event_id, type, data, metadata)
            -- unnest, not subscripts: a subscript into a flat array of variable-length values
            -- walks it from the start, which made large batches quadratic.
            select t.stream, t.rev, t.id, t.type, t.data, coalesce(t.metadata, '{}'::jsonb)
            from unnest(e_stream, e_rev, p_ids, p_types, p_data, p_metadata) with ordinality as t(stream, rev, id, type, data, metadata, n)
            where t.rev is not null order by t.n
            returning es_events.event_id, es_events.position
          )
          select array_agg(i.event_id), array_agg(i.position) into v_ins_ids, v_ins_pos from inserted i;
          v_xid := pg_current_xact_id()::text;
          for v_q in 1 .. n_parts loop
            if o_out[v_q] = 'appended' then
              o_commit[v_q] := v_xid;
              o_prep[v_q] := v_ins_pos[array_position(v_ins_ids, p_ids[first_event[v_q] + p_count[v_q] - 1])];
            end if;
          end loop;
        end if;
        if v_any_dup then
          for v_row in select e.event_id, e.transaction_id::text as commit, e.position from es_events e where e.event_id = any(o_dup) loop
            for v_q in 1 .. n_parts loop
              if o_dup[v_q] = v_row.event_id then o_commit[v_q] := v_row.commit; o_prep[v_q] := v_row.position; end if;
            end loop;
          end loop;
        end if;
        return query select o_out, o_rev, o_commit, o_prep;
      end
      $fn$;
    

      -- One round trip per append: lock the stream, check idempotency and the expected
      -- revision, insert, notify. The advisory lock is taken before the transaction draws an
      -- id, so ids (and thus global order) follow the per-stream lock order.
      create or replace function es_append(
        p_stream text, p_expected text, p_ids uuid[], p_types text[], p_data jsonb[], p_metadata jsonb[]
      ) returns table (outcome text, next_revision bigint, commit_position text, prepare_position bigint)
      language plpgsql
      set enable_seqscan = off
      set plan_cache_mode = force_generic_plan
      as $fn$
      declare
        v_current bigint;
        v_first bigint;
        v_existing int;
        v_foreign int;
      begin
        perform pg_advisory_xact_lock(hashtextextended(p_stream, 0));
        select count(*), count(*) filter (where e.stream_id <> p_stream)
          into v_existing, v_foreign from es_events e where e.event_id = any(p_ids);
        if v_existing > 0 then
          if v_existing = cardinality(p_ids) and v_foreign = 0 then
            return query select 'duplicate', e.revision, e.transaction_id::text, e.position
              from es_events e where e.event_id = any(p_ids) order by e.revision desc limit 1;
          else
            return query select 'event_id_conflict', null::bigint, null::text, null::bigint;
          end if;
          return;
        end if;
        select max(e.revision) into v_current from es_events e where e.stream_id = p_stream;
        if not (p_expected = 'any'
                or (p_expected = 'no_stream' and v_current is null)
                or (p_expected = 'stream_exists' and v_current is not null)
                or (p_expected ~ '^[0-9]+$' and v_current is not null and v_current = p_expected::bigint)) then
          return query select 'wrong_expected_revision', v_current, null::text, null::bigint;
          return;
        end if;
        v_first := coalesce(v_current + 1, 0);
        return query
          with inserted as (
            insert into es_events (stream_id, revision, event_id, type, data, metadata)
            select p_stream, v_first + t.n - 1, t.id, t.type, t.data, coalesce(t.metadata, '{}'::jsonb)
            from unnest(p_ids, p_types, p_data, p_metadata) with ordinality as t(id, type, data, metadata, n)
            returning es_events.revision, es_events.transaction_id, es_events.position
          )
          select 'appended', i.revision, i.transaction_id::text, i.position from inserted i order by i.position desc limit 1;
      end
      $fn$;
    
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
               and l1.relation in ('es_events'::regclass)
               and l1.pid <> pg_backend_pid())),
          pg_snapshot_xmax(snap.s))
        from (select pg_current_snapshot() as s) snap);
      end
      $fn$;
