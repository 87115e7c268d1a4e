-- The offboarding ledger: which tenants were erased and when, nothing personal. A restore from an
-- older backup brings a tenant's logins back; this lets their offboarding be applied again.
-- Operators only: no tenant role reads it, so it has no row-level security.
create table tenant_offboardings (
  tenant_id uuid primary key,
  offboarded_at timestamptz not null,
  recorded_at timestamptz not null default now()
);
