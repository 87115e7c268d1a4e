-- One e-mail normalisation (computed in JavaScript) for uniqueness and lookups; and
-- when a user's role was last decided, so a replay never undoes a later change.
      alter table users add column email_key text;
      -- normalize() needs a UTF8 server; the embedded default may be initialised otherwise.
      update users set email_key = case when current_setting('server_encoding') = 'UTF8'
        then lower(normalize(btrim(email), NFKC)) else lower(btrim(email)) end;
      alter table users alter column email_key set not null;
      create unique index users_tenant_email_key on users (tenant_id, email_key);
      drop index users_tenant_email;
      alter table users add column role_set_at timestamptz;
