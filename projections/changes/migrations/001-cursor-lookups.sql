-- A feed cursor looked up by its log position for the tenant role: below a row-level security
-- policy numeric comparisons (not leakproof) cannot use an index. These run as their owner, who
-- bypasses the policy, check the tenant themselves, and answer only a place in apply order.
-- `employee_changes` is named at each call: a rebuild renames a new table over it.
set local check_function_bodies = off;

-- The change at (commit, prepare), or null.
create function employee_changes_seq_at(tenant uuid, commit_position numeric, prepare_position numeric) returns bigint
  language sql stable parallel safe security definer set search_path = pg_catalog, public, pg_temp
  as $fn$
    select c.seq from employee_changes c
    where c.tenant_id = $1 and c.commit_position = $2 and c.prepare_position = $3
      and coalesce(nullif(current_setting('app.tenant_id', true), '')::uuid, $1) = $1
  $fn$;

-- Where the changes after the cursor start: after the change it names; at the start, before
-- them all (every `seq` is at least 1); else, when that change is gone (a rebuild parked it),
-- just before the first one with a later log position; else after the last one (0 when the
-- tenant has none). The later changes are a sub-select of their own (`offset 0`): the plan of a
-- function does not know the cursor, and would seek the smallest `seq` by walking the tenant's
-- changes in `seq` order from the first.
create function employee_changes_seq_after(tenant uuid, commit_position numeric, prepare_position numeric) returns bigint
  language sql stable parallel safe security definer set search_path = pg_catalog, public, pg_temp
  as $fn$
    select case when coalesce(nullif(current_setting('app.tenant_id', true), '')::uuid, $1) = $1 then coalesce(
      employee_changes_seq_at($1, $2, $3),
      case when ($2, $3) = (0, 0) then 0 end,
      (select min(later.seq) - 1 from (
         select c.seq from employee_changes c
         where c.tenant_id = $1 and (c.commit_position, c.prepare_position) > ($2, $3)
         offset 0) later),
      (select max(c.seq) from employee_changes c where c.tenant_id = $1),
      0) else 0 end
  $fn$;

revoke all on function employee_changes_seq_at(uuid, numeric, numeric) from public;
revoke all on function employee_changes_seq_after(uuid, numeric, numeric) from public;
grant execute on function employee_changes_seq_at(uuid, numeric, numeric) to eas_tenant;
grant execute on function employee_changes_seq_after(uuid, numeric, numeric) to eas_tenant;
