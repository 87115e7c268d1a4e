-- One data key per data subject (an employee), sealed by a key-encryption key kept outside the
-- database. Erasure destroys the key and keeps the row, so an erased subject is known as such and
-- never gets a new key. Not granted to the tenant role: only the service's own role reads keys.
create table personal_data_keys (
  tenant_id uuid not null,
  subject_id text not null,
  key_id text not null,
  kek_id text,
  sealed_key text,
  created_at timestamptz not null default now(),
  destroyed_at timestamptz,
  primary key (tenant_id, subject_id),
  constraint personal_data_keys_destroyed check ((destroyed_at is null) = (sealed_key is not null and kek_id is not null))
);
