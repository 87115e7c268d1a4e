-- Clusters created before PostgreSQL 15 (and upgraded) still let every role create objects in the
-- public schema; analysts' logins and the tenant role must not. The migrating role keeps CREATE
-- (granted to itself first: on those clusters it may have had it only through PUBLIC). A role that
-- owns neither the schema nor superuser rights gets only warnings here, and nothing changes.
    do $$
    begin
      execute format('grant create on schema public to %I', current_user);
    end $$;
    revoke create on schema public from public;
