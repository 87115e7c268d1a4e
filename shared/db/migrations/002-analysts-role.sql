-- The group role of analysts' own database logins: it is granted SELECT on read-model tables only,
-- and each login is a member. The tenant a login reads is looked up from its login name in
-- analyst_logins (through analyst_tenant_id), never from a setting the login could change itself.
    do $$
    begin
      if not exists (select 1 from pg_roles where rolname = 'eas_analysts') then
        create role eas_analysts nologin nobypassrls;
      end if;
    exception when duplicate_object or unique_violation then null; -- created concurrently
    end $$;
    grant usage on schema public to eas_analysts;

    create table analyst_logins (
      role_name text primary key,
      tenant_id uuid not null,
      created_at timestamptz not null default now()
    );
    create index analyst_logins_tenant on analyst_logins (tenant_id);

    -- session_user, not current_user: a login may SET ROLE to its group, never to another login;
    -- and inside a security definer function current_user is the function's owner. The body is
    -- bound at creation (begin atomic), so a login's search_path cannot swap the table.
    create function analyst_tenant_id() returns uuid
      language sql stable security definer set search_path = pg_catalog, pg_temp
      begin atomic
        select tenant_id from analyst_logins where role_name = session_user;
      end;
    revoke all on function analyst_tenant_id() from public;
    grant execute on function analyst_tenant_id() to eas_analysts;
