-- Revoking a login in steps, each its own transaction, so that nothing the login did can keep its
-- access: first the access is cut (no login, no group role, no tenant binding: it then sees no row
-- and cannot connect again), then the ops command ends its sessions (their temporary tables go
-- with them), then what it still owns here (large objects, for one) is dropped with
-- the role. A drop that fails leaves the login in analyst_logins_revoked, without access, for the
-- next revoke to finish.
create table analyst_logins_revoked (
  role_name text primary key,
  tenant_id uuid not null,
  revoked_at timestamptz not null default now()
);

-- Step one: cut the login's access. False, and nothing done, for a name that is not an analyst
-- login (bound, or revoked and not yet dropped).
create function analyst_login_revoke_access(login text) returns boolean language plpgsql as $fn$
begin
  with unbound as (delete from analyst_logins where role_name = login returning role_name, tenant_id)
  insert into analyst_logins_revoked (role_name, tenant_id) select role_name, tenant_id from unbound on conflict (role_name) do nothing;
  if not exists (select from analyst_logins_revoked where role_name = login) then
    return false;
  end if;
  if exists (select from pg_roles where rolname = login) then
    execute format('alter role %I nologin', login);
    execute format('revoke eas_analysts from %I', login);
  end if;
  return true;
end
$fn$;
revoke all on function analyst_login_revoke_access(text) from public;

-- Last step: drop what a revoked login owns in this database, then the role. DROP OWNED needs the
-- role's privileges, which a non-superuser owner (with CREATEROLE) first grants itself. A lock
-- held by a session that could not be ended fails the step after lock_timeout instead of hanging.
-- False, and nothing done, for a name whose access was not cut first.
create or replace function analyst_login_drop(login text) returns boolean language plpgsql set lock_timeout = '10s' as $fn$
begin
  if not exists (select from analyst_logins_revoked where role_name = login) then
    return false;
  end if;
  if exists (select from pg_roles where rolname = login) then
    if not pg_has_role(current_user, login, 'usage') then
      execute format('grant %I to %I', login, current_user);
    end if;
    execute format('drop owned by %I', login);
    execute format('drop role %I', login);
  end if;
  delete from analyst_logins_revoked where role_name = login;
  return true;
end
$fn$;
revoke all on function analyst_login_drop(text) from public;
