-- The erasure ledger: who was erased and when, nothing personal. It outlives the data it
-- erased, so erasures can be applied again to a database restored from an older backup.
-- Operators only: no tenant role reads it, so it has no row-level security.
create table employee_erasures (
  tenant_id uuid not null,
  employee_id text not null,
  erased_at timestamptz not null,
  recorded_at timestamptz not null default now(),
  primary key (tenant_id, employee_id)
);
