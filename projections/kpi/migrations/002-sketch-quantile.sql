-- For analysts: quantiles straight from a stored latency sketch, e.g.
-- kpi_sketch_quantile(latency_sketch, 0.95) from kpi_usage_hours.
      create function kpi_sketch_varint(sketch bytea, pos integer, out value bigint, out next integer)
      language plpgsql immutable strict as $fn$
      declare
        b integer;
        scale bigint := 1;
      begin
        value := 0;
        next := pos;
        loop
          b := get_byte(sketch, next);
          next := next + 1;
          value := value + (b & 127) * scale;
          exit when b < 128;
          scale := scale * 128;
        end loop;
      end
      $fn$;

      create function kpi_sketch_quantile(sketch bytea, q double precision) returns double precision
      language plpgsql immutable strict as $fn$
      declare
        alpha constant double precision := 0.005;
        gamma constant double precision := (1 + alpha) / (1 - alpha);
        expected constant bytea := float8send(0.005::double precision);
        total bigint;
        zero bigint;
        bins bigint;
        pos integer;
        d bigint;
        c bigint;
        idx bigint := 0;
        seen bigint;
        rank bigint;
        r record;
      begin
        if q < 0 or q > 1 then raise exception 'q must be in [0, 1]'; end if;
        if get_byte(sketch, 0) <> 1 then raise exception 'unknown sketch format %', get_byte(sketch, 0); end if;
        for i in 0..7 loop -- stored little-endian; float8send is big-endian
          if get_byte(sketch, 1 + i) <> get_byte(expected, 7 - i) then raise exception 'sketch accuracy is not 0.005'; end if;
        end loop;
        r := kpi_sketch_varint(sketch, 9); total := r.value;
        r := kpi_sketch_varint(sketch, r.next); zero := r.value;
        pos := r.next + 24; -- sum, min, max (float8 each)
        r := kpi_sketch_varint(sketch, pos); bins := r.value; pos := r.next;
        if total = 0 then return null; end if;
        rank := floor(q * (total - 1));
        if rank < zero then return 0; end if;
        seen := zero;
        for i in 1..bins loop
          r := kpi_sketch_varint(sketch, pos); d := r.value;
          r := kpi_sketch_varint(sketch, r.next); c := r.value; pos := r.next;
          idx := idx + case when d % 2 = 0 then d / 2 else -(d + 1) / 2 end;
          seen := seen + c;
          if seen > rank then return 2 * power(gamma, idx) / (gamma + 1); end if;
        end loop;
        return null;
      end
      $fn$;
      grant execute on function kpi_sketch_quantile(bytea, double precision) to eas_tenant;
      grant execute on function kpi_sketch_varint(bytea, integer) to eas_tenant;
