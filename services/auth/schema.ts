import { tenantScopedDdl, type Migration } from '../../shared/db/migrate.ts';

export const authMigrations: readonly Migration[] = [
  {
    id: 'auth/001-roles-users-refresh-tokens',
    sql: `
      create table roles (
        id uuid primary key default gen_random_uuid(),
        tenant_id uuid not null references tenants (id) on delete cascade,
        name text not null,
        created_at timestamptz not null default now(),
        unique (tenant_id, name)
      );
      ${tenantScopedDdl('roles')}

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
      ${tenantScopedDdl('users')}

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
      ${tenantScopedDdl('refresh_tokens')}
    `,
  },
  {
    // One e-mail normalisation (shared/email.ts, computed in JavaScript) for uniqueness and every
    // lookup, instead of PostgreSQL lower(), which disagrees with JavaScript on some letters.
    // Existing rows get the closest SQL equivalent; new rows always get the JavaScript value.
    // role_set_at: when the user's role was last decided; the role-assignment reactor applies an
    // employee's EmployeeRoleAssigned only if it is not older (a replay never undoes a later change).
    id: 'auth/002-users-email-key-role-set-at',
    sql: `
      alter table users add column email_key text;
      -- normalize() needs a UTF8 server; the embedded default may be initialised otherwise.
      update users set email_key = case when current_setting('server_encoding') = 'UTF8'
        then lower(normalize(btrim(email), NFKC)) else lower(btrim(email)) end;
      alter table users alter column email_key set not null;
      create unique index users_tenant_email_key on users (tenant_id, email_key);
      drop index users_tenant_email;
      alter table users add column role_set_at timestamptz;
    `,
  },
];
