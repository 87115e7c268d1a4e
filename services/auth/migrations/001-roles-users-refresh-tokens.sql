-- Logins, their roles and refresh tokens, each table tenant-scoped.
      create table roles (
        id uuid primary key default gen_random_uuid(),
        tenant_id uuid not null references tenants (id) on delete cascade,
        name text not null,
        created_at timestamptz not null default now(),
        unique (tenant_id, name)
      );
      
  alter table roles enable row level security;
  alter table roles force row level security;
  create policy roles_tenant_isolation on roles
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)
    with check (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
  grant select, insert, update, delete on roles to eas_tenant;


      -- A user is a login. Its role_id is the one source of truth for a person's role.
      -- password_hash is null for an account created by an employee's roleId that has no
      -- password yet: it holds the role but cannot log in.
      create table users (
        id uuid primary key default gen_random_uuid(),
        tenant_id uuid not null references tenants (id) on delete cascade,
        email text not null check (length(email) between 3 and 320),
        password_hash text,
        role_id uuid not null references roles (id),
        disabled_at timestamptz,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      );
      create unique index users_tenant_email on users (tenant_id, lower(email));
      
  alter table users enable row level security;
  alter table users force row level security;
  create policy users_tenant_isolation on users
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)
    with check (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
  grant select, insert, update, delete on users to eas_tenant;


      -- Refresh tokens are opaque to clients and stored only as sha256 digests.
      create table refresh_tokens (
        id uuid primary key default gen_random_uuid(),
        tenant_id uuid not null references tenants (id) on delete cascade,
        user_id uuid not null references users (id) on delete cascade,
        family_id uuid not null,
        token_hash text not null unique check (token_hash ~ '^[0-9a-f]{64}$'),
        expires_at timestamptz not null,
        rotated_at timestamptz,
        revoked_at timestamptz,
        created_at timestamptz not null default now()
      );
      create index refresh_tokens_family on refresh_tokens (family_id);
      create index refresh_tokens_user on refresh_tokens (user_id);
      
  alter table refresh_tokens enable row level security;
  alter table refresh_tokens force row level security;
  create policy refresh_tokens_tenant_isolation on refresh_tokens
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)
    with check (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
  grant select, insert, update, delete on refresh_tokens to eas_tenant;
