-- Tenants are global (no row-level security): they are what a request is scoped by.
-- Nothing secret lives here; the tenant role may read it.
      create table tenants (
        id uuid primary key default gen_random_uuid(),
        slug text not null unique check (slug ~ '^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$'),
        name text not null check (length(name) between 1 and 200),
        plan text not null check (plan in ('starter', 'pro', 'enterprise')),
        rate_per_minute integer check (rate_per_minute > 0),
        rate_burst integer check (rate_burst > 0),
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now(),
        check ((rate_per_minute is null) = (rate_burst is null))
      );
      grant select on tenants to eas_tenant;
