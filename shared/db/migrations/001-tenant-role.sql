-- The role that tenant-scoped transactions switch to, so that row-level security
-- filters them; created once per cluster and granted to the migrating user.
    do $$
    begin
      if not exists (select 1 from pg_roles where rolname = 'eas_tenant') then
        create role eas_tenant nologin;
      end if;
    exception when duplicate_object or unique_violation then null; -- created concurrently
    end $$;
    do $$
    begin
      execute format('grant eas_tenant to %I', current_user);
    exception when others then null; -- already granted, or we are a superuser
    end $$;
    grant usage on schema public to eas_tenant;
