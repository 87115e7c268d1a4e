-- The temporal and workforce read models, for deployments that built them before their projection
-- granted them to analysts itself: the same grant and policies as the other read models, on the
-- tables found without them (a table built from now on has them from its projection's DDL).
do $$
declare
  t text;
begin
  foreach t in array array['employee_versions', 'workforce_day_counts', 'workforce_month_counts'] loop
    if to_regclass(t) is not null and not exists (select from pg_policies where tablename = t and 'eas_analysts' = any(roles)) then
      execute format('grant select on %I to eas_analysts', t);
      execute format('create policy %I on %I for select to eas_analysts using (tenant_id = (select analyst_tenant_id()))',
                     t || '_analyst', t);
      execute format('create policy %I on %I as restrictive to eas_analysts using (tenant_id = (select analyst_tenant_id()))',
                     t || '_analyst_only', t);
    end if;
  end loop;
end
$$;
