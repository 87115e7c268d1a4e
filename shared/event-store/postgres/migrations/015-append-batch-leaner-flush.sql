-- The flush with less executor work on every call: the usual batch in three
-- statements; the request-by-request path set up only when it runs. Both overloads.
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
        v_locked bigint; v_batch_ok boolean; v_single boolean; v_revs bigint[]; v_event_part int[]; v_event_nth int[];
      begin
        -- Every stream of the batch locked in one order shared by all writers (no deadlock
        -- between gateways flushing at once), before the transaction draws its id: global
        -- order follows the per-stream lock order (see the adapter's header). The statements
        -- below take their snapshots after this one.
        perform pg_advisory_xact_lock(k.h) from (select distinct hashtextextended(s, 0) as h from unnest(p_stream) s order by 1) k;
        get diagnostics v_locked = row_count;
        if v_locked = n_parts then
          select coalesce(array_agg(coalesce(st.revision, -1) + p.cnt order by p.n), '{}'),
                 coalesce(bool_and(coalesce(p.cnt >= 1, false) and coalesce(case p.expected
                   when 'any' then true
                   when 'no_stream' then st.revision is null
                   when 'stream_exists' then st.revision is not null
                   else case when p.expected ~ '^[0-9]+$' then st.revision = p.expected::bigint else false end
                 end, false)), true)
                   and coalesce(sum(p.cnt), 0) = n_events
                   and not exists (select 1 from es_events e where e.event_id = any(p_ids))
                   and (select count(distinct x) from unnest(p_ids) x) = n_events,
                 coalesce(bool_and(p.cnt = 1), true)
            into v_revs, v_batch_ok, v_single
            from unnest(p_stream, p_expected, p_count) with ordinality as p(stream, expected, cnt, n)
            left join lateral (select max(x.revision) as revision from es_events x where x.stream_id = p.stream) st on true;
          if v_batch_ok then
            -- Each event's part and its place in it (when some part has several; else the
            -- event's own place in the batch is its part's).
            if not v_single then
              select array_agg(p.n order by p.n, g.k), array_agg(g.k order by p.n, g.k) into v_event_part, v_event_nth
                from unnest(p_count) with ordinality as p(cnt, n), generate_series(1, p.cnt) as g(k);
            end if;
            with inserted as (
              insert into es_events (stream_id, revision, event_id, type, data, metadata)
              select p.stream, p.rev - p.cnt + coalesce(e.k, 1), e.id, e.type, e.data, coalesce(e.metadata, '{}'::jsonb)
              from unnest(v_event_part, v_event_nth, p_ids, p_types, p_data, p_metadata) with ordinality as e(part, k, id, type, data, metadata, n)
              join unnest(p_stream, v_revs, p_count) with ordinality as p(stream, rev, cnt, pn) on p.pn = coalesce(e.part, e.n)
              order by e.n
              returning es_events.stream_id, es_events.position
            )
            select coalesce(array_agg(l.position order by l.position), '{}') into prepares
              from (select max(i.position) as position from inserted i group by i.stream_id) l;
            outcomes := array_fill('appended'::text, array[n_parts]);
            revisions := v_revs;
            commits := array_fill(case when n_parts > 0 then pg_current_xact_id()::text end, array[n_parts]);
            return next;
            return;
          end if;
        end if;

        -- Decided request by request.
      declare
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
        v_repeats boolean := (select count(distinct x) from unnest(p_ids) x) < n_events;
        v_xid text; v_row record;
        begin
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
            if not coalesce(v_exp = 'any'
                    or (v_exp = 'no_stream' and v_cur < 0)
                    or (v_exp = 'stream_exists' and v_cur >= 0)
                    or (v_exp ~ '^[0-9]+$' and v_cur = v_exp::bigint), false) then
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
        end;
      end
      $fn$;
    
      create or replace function es_append_batch(
        p_req int[], p_stream text[], p_expected text[], p_count int[],
        p_ids uuid[], p_types text[], p_data jsonb[], p_metadata jsonb[], p_wake text
      ) returns table (outcomes text[], revisions bigint[], commits text[], prepares bigint[])
      language plpgsql
      set enable_seqscan = off
      set plan_cache_mode = force_generic_plan
      as $fn$
      declare
        n_parts int := coalesce(cardinality(p_stream), 0);
        n_events int := coalesce(cardinality(p_ids), 0);
        v_locked bigint; v_batch_ok boolean; v_single boolean; v_revs bigint[]; v_event_part int[]; v_event_nth int[];
      begin
        -- Every stream of the batch locked in one order shared by all writers (no deadlock
        -- between gateways flushing at once), before the transaction draws its id: global
        -- order follows the per-stream lock order (see the adapter's header). The statements
        -- below take their snapshots after this one.
        perform pg_advisory_xact_lock(k.h) from (select distinct hashtextextended(s, 0) as h from unnest(p_stream) s order by 1) k;
        get diagnostics v_locked = row_count;
        -- The wake-up of live readers, sent by this transaction's commit (dropped if it aborts).
        if p_wake is not null then perform pg_notify(p_wake, ''); end if;
        if v_locked = n_parts then
          select coalesce(array_agg(coalesce(st.revision, -1) + p.cnt order by p.n), '{}'),
                 coalesce(bool_and(coalesce(p.cnt >= 1, false) and coalesce(case p.expected
                   when 'any' then true
                   when 'no_stream' then st.revision is null
                   when 'stream_exists' then st.revision is not null
                   else case when p.expected ~ '^[0-9]+$' then st.revision = p.expected::bigint else false end
                 end, false)), true)
                   and coalesce(sum(p.cnt), 0) = n_events
                   and not exists (select 1 from es_events e where e.event_id = any(p_ids))
                   and (select count(distinct x) from unnest(p_ids) x) = n_events,
                 coalesce(bool_and(p.cnt = 1), true)
            into v_revs, v_batch_ok, v_single
            from unnest(p_stream, p_expected, p_count) with ordinality as p(stream, expected, cnt, n)
            left join lateral (select max(x.revision) as revision from es_events x where x.stream_id = p.stream) st on true;
          if v_batch_ok then
            -- Each event's part and its place in it (when some part has several; else the
            -- event's own place in the batch is its part's).
            if not v_single then
              select array_agg(p.n order by p.n, g.k), array_agg(g.k order by p.n, g.k) into v_event_part, v_event_nth
                from unnest(p_count) with ordinality as p(cnt, n), generate_series(1, p.cnt) as g(k);
            end if;
            with inserted as (
              insert into es_events (stream_id, revision, event_id, type, data, metadata)
              select p.stream, p.rev - p.cnt + coalesce(e.k, 1), e.id, e.type, e.data, coalesce(e.metadata, '{}'::jsonb)
              from unnest(v_event_part, v_event_nth, p_ids, p_types, p_data, p_metadata) with ordinality as e(part, k, id, type, data, metadata, n)
              join unnest(p_stream, v_revs, p_count) with ordinality as p(stream, rev, cnt, pn) on p.pn = coalesce(e.part, e.n)
              order by e.n
              returning es_events.stream_id, es_events.position
            )
            select coalesce(array_agg(l.position order by l.position), '{}') into prepares
              from (select max(i.position) as position from inserted i group by i.stream_id) l;
            outcomes := array_fill('appended'::text, array[n_parts]);
            revisions := v_revs;
            commits := array_fill(case when n_parts > 0 then pg_current_xact_id()::text end, array[n_parts]);
            return next;
            return;
          end if;
        end if;

        -- Decided request by request.
      declare
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
        v_repeats boolean := (select count(distinct x) from unnest(p_ids) x) < n_events;
        v_xid text; v_row record;
        begin
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
            if not coalesce(v_exp = 'any'
                    or (v_exp = 'no_stream' and v_cur < 0)
                    or (v_exp = 'stream_exists' and v_cur >= 0)
                    or (v_exp ~ '^[0-9]+$' and v_cur = v_exp::bigint), false) then
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
        end;
      end
      $fn$;
