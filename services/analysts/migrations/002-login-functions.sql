-- Creating and dropping analysts' logins with every value bound: role DDL takes no parameters, so
-- the ops command calls these (as the owner, which needs CREATEROLE) instead of building statement
-- text. A login is read-only by default and bounded (connections, statement and idle time); the
-- grants and the policies, not these defaults, are the wall: a login may change its own settings.
create function analyst_login_create(login text, tenant uuid, password_verifier text, connection_limit integer, statement_timeout text)
returns void language plpgsql as $fn$
begin
  execute format('create role %I login nosuperuser nocreatedb nocreaterole noreplication nobypassrls inherit connection limit %s password %L in role eas_analysts',
                 login, connection_limit, password_verifier);
  execute format('alter role %I set statement_timeout = %L', login, statement_timeout);
  execute format('alter role %I set idle_in_transaction_session_timeout = %L', login, statement_timeout);
  execute format('alter role %I set default_transaction_read_only = on', login);
  insert into analyst_logins (role_name, tenant_id) values (login, tenant);
end
$fn$;
revoke all on function analyst_login_create(text, uuid, text, integer, text) from public;

-- Forgets the login's tenant and drops the role; its open sessions, if any, keep no privilege.
-- Only a role that is an analyst login is dropped: false, and nothing done, for any other name.
create function analyst_login_drop(login text) returns boolean language plpgsql as $fn$
begin
  delete from analyst_logins where role_name = login;
  if not found then
    return false;
  end if;
  if exists (select 1 from pg_roles where rolname = login) then
    execute format('drop role %I', login);
  end if;
  return true;
end
$fn$;
revoke all on function analyst_login_drop(text) from public;
