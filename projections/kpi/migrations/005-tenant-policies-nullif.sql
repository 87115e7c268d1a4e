-- The usage tables' tenant policies, and those of billing read-model tables built before now, in
-- the nullif form: a session that set and reset app.tenant_id reads '', which a bare ::uuid cast
-- refused with an error instead of matching no rows.
alter policy kpi_usage_minutes_tenant on kpi_usage_minutes using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
alter policy kpi_usage_hours_tenant on kpi_usage_hours using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
alter policy kpi_user_activity_tenant on kpi_user_activity using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
alter policy kpi_daily_users_tenant on kpi_daily_users using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
alter policy kpi_tenant_usage_tenant on kpi_tenant_usage using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
alter policy kpi_usage_days_tenant on kpi_usage_days using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
do $$
declare p record;
begin
  for p in select schemaname, tablename, policyname from pg_policies
           where qual = '(tenant_id = (current_setting(''app.tenant_id''::text, true))::uuid)' loop
    execute format('alter policy %I on %I.%I using (tenant_id = nullif(current_setting(''app.tenant_id'', true), '''')::uuid)',
                   p.policyname, p.schemaname, p.tablename);
  end loop;
end
$$;
