-- The read models analysts' logins read: the KPI usage tables, and the projections' tables where
-- they were built before projections granted them themselves (a table built from now on gets the
-- same grant and policies from its projection's DDL). Each gets SELECT for the analysts' group, a
-- policy letting a login read its own tenant's rows, and a restrictive one so that no other
-- policy (the service's, keyed on a setting any session may change) lets it read more. A table
-- that already has them (built by a projection's own DDL) is left as it is.
do $$
declare
  t text;
begin
  foreach t in array array[
    'kpi_usage_minutes', 'kpi_usage_hours', 'kpi_usage_days', 'kpi_daily_users', 'kpi_user_activity', 'kpi_tenant_usage',
    'kpi_billing_facts', 'kpi_subscriptions', 'kpi_subscription_periods', 'kpi_mrr_movements', 'kpi_billing_tenants',
    'employees', 'employee_counts', 'employee_month_counts', 'employee_day_counts'
  ] loop
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
grant execute on function kpi_sketch_quantile(bytea, double precision) to eas_analysts;
grant execute on function kpi_sketch_varint(bytea, integer) to eas_analysts;
