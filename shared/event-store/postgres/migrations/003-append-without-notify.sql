-- The append without its NOTIFY: inside the transaction it serialised every commit
-- on the notification queue's lock; the adapter wakes readers after commit instead.
      -- One round trip per append: lock the stream, check idempotency and the expected
      -- revision, insert, notify. The advisory lock is taken before the transaction draws an
      -- id, so ids (and thus global order) follow the per-stream lock order.
      create or replace function es_append(
        p_stream text, p_expected text, p_ids uuid[], p_types text[], p_data jsonb[], p_metadata jsonb[]
      ) returns table (outcome text, next_revision bigint, commit_position text, prepare_position bigint)
      language plpgsql as $fn$
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
        select s.revision into v_current from es_streams s where s.stream_id = p_stream;
        if not (p_expected = 'any'
                or (p_expected = 'no_stream' and v_current is null)
                or (p_expected = 'stream_exists' and v_current is not null)
                or (p_expected ~ '^[0-9]+$' and v_current is not null and v_current = p_expected::bigint)) then
          return query select 'wrong_expected_revision', v_current, null::text, null::bigint;
          return;
        end if;
        v_first := coalesce(v_current + 1, 0);
        insert into es_streams as s (stream_id, revision) values (p_stream, v_first + cardinality(p_ids) - 1)
          on conflict (stream_id) do update set revision = excluded.revision;
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
