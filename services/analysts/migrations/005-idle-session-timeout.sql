-- Logins are also bounded in idle time outside a transaction, so that a forgotten BI connection
-- does not hold one of the login's connection slots for ever; as before, defaults the login may
-- change, not the wall. Existing logins get the default of the ops command.
drop function analyst_login_create(text, uuid, text, integer, text);
create function analyst_login_create(login text, tenant uuid, password_verifier text, connection_limit integer, statement_timeout text,
                                     idle_session_timeout text)
returns void language plpgsql as $fn$
begin
  execute format('create role %I login nosuperuser nocreatedb nocreaterole noreplication nobypassrls inherit connection limit %s password %L in role eas_analysts',
                 login, connection_limit, password_verifier);
  execute format('alter role %I set statement_timeout = %L', login, statement_timeout);
  execute format('alter role %I set idle_in_transaction_session_timeout = %L', login, statement_timeout);
  execute format('alter role %I set idle_session_timeout = %L', login, idle_session_timeout);
  execute format('alter role %I set default_transaction_read_only = on', login);
  insert into analyst_logins (role_name, tenant_id) values (login, tenant);
end
$fn$;
revoke all on function analyst_login_create(text, uuid, text, integer, text, text) from public;

do $$
declare
  login text;
begin
  for login in select l.role_name from analyst_logins l join pg_roles r on r.rolname = l.role_name loop
    execute format('alter role %I set idle_session_timeout = %L', login, '10min');
  end loop;
end
$$;
