-- Advisory locks, pg_notify and creating large objects need no privilege by default, so any role
-- that may connect (an analyst's login, read-only or not) could hold the service's own lock keys
-- (the migrations', a projection rebuild's, an event stream's append lock: every tenant's writes
-- would wait), flood its notification channels, or store data of its own. Here only the service's
-- roles keep them: the migrating role (the service connects as it) and the tenant role its
-- transactions switch to. These are pg_catalog functions: only a superuser may change who runs
-- them, so under an owner that is not one this does nothing but say so (docs/operations.md).
-- The NOTIFY and LISTEN statements take no privilege and are not covered.
do $$
declare
  f regprocedure;
begin
  if not (select rolsuper from pg_roles where rolname = current_user) then
    raise notice 'not a superuser: advisory locks, pg_notify and large objects stay open to every role';
    return;
  end if;
  for f in
    select p.oid::regprocedure from pg_proc p
    where p.pronamespace = 'pg_catalog'::regnamespace
      and (p.proname like 'pg\_advisory\_%' or p.proname like 'pg\_try\_advisory\_%'
           or p.proname in ('pg_notify', 'lo_create', 'lo_creat', 'lo_from_bytea', 'lo_import'))
  loop
    execute format('revoke execute on function %s from public', f);
    execute format('grant execute on function %s to %I, eas_tenant', f, current_user);
  end loop;
end
$$;
