-- The change feed, read as the tenant role, serves the changes of a person the ledger records as
-- erased with their personal fields blank, also before its projector has applied the erasure. So
-- the tenant role reads the ledger, each tenant its own rows (ids and times, nothing personal).
-- Not forced: the service's own role records erasures and lists them across tenants for the
-- backup catalogue, and must see every row whatever its RLS bypass.
alter table employee_erasures enable row level security;
create policy employee_erasures_tenant on employee_erasures
  using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
grant select on employee_erasures to eas_tenant;
