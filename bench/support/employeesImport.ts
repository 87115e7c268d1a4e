/**
 * Bulk import, documented: for each employee an `EmployeeHired` event on its own stream, an
 * `EmployeeEmailReserved` event on its email's reservation stream (so uniqueness holds for
 * imported staff too) and, for 20%, an `EmployeeStatusChanged` (10% on_leave, 10% inactive),
 * written with COPY into es_events in ONE transaction: the import is all or
 * nothing, and the events become visible to projectors at once, in one commit.
 *
 * Sealed by default, as the service stores them: each employee gets a data key (COPY into
 * `personal_data_keys`, sealed by the bench run's key-encryption key), its address, names and
 * status reason are sealed with it, and its reservation stream is named by the run's email hash.
 * `sealed: false` writes the log as it was before sealing (the replay bench's comparison).
 */
import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { monotonicFactory } from 'ulid';
import { emailReservationStreamId } from '../../services/employees/emailReservation.ts';
import { EMPLOYEE_PERSONAL_FIELDS, employeePersonalData, employeeStreamId } from '../../services/employees/contract.ts';
import type { DatabasePool } from '../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../shared/event-store/port.ts';
import { createSealingEventStore } from '../../shared/event-store/sealing.ts';
import { createDataKeyStore, makeDataKey } from '../../shared/personal-data/dataKeys.ts';
import { startBulkOpener } from '../../shared/personal-data/bulkOpener.ts';
import { createEmailHash } from '../../shared/personal-data/emailHash.ts';
import { fieldPlace, sealValue } from '../../shared/personal-data/fieldCipher.ts';
import { createKeyEncryptionKeys, parseKeyEncryptionKeys } from '../../shared/personal-data/keyEncryptionKeys.ts';
import { benchPersonalDataEnv } from './services.ts';

const DEPARTMENTS = ['engineering', 'sales', 'marketing', 'support', 'finance', 'hr', 'legal', 'operations', 'research', 'design'];

/** COPY text format: escape the characters COPY treats specially. */
const copyField = (value: string) => value.replace(/\\/g, '\\\\').replace(/\t/g, '\\t').replace(/\n/g, '\\n').replace(/\r/g, '\\r');

const keks = createKeyEncryptionKeys(parseKeyEncryptionKeys(benchPersonalDataEnv.KEY_ENCRYPTION_KEY));
const emailHash = createEmailHash(Buffer.from(benchPersonalDataEnv.EMAIL_HASH_KEY, 'base64'));
const HIRED_FIELDS = EMPLOYEE_PERSONAL_FIELDS.EmployeeHired ?? [];

/** A PostgreSQL event store behind the sealing boundary with this run's keys: what reads an imported log. */
export function benchEventStore(pool: DatabasePool): EventStore {
  return createSealingEventStore(createPostgresEventStore(pool), {
    keys: createDataKeyStore(pool, keks),
    policy: employeePersonalData,
    bulkOpener: () => startBulkOpener(keks),
  });
}

/**
 * Bulk import of `count` employees as events, in one transaction.
 * Returns the number of events written and how long it took.
 */
export async function importEmployees(databaseUrl: string, tenantId: string, count: number, options: { readonly sealed?: boolean } = {}) {
  const sealed = options.sealed ?? true;
  const started = Date.now();
  const nextId = monotonicFactory();
  const yearMs = 365 * 24 * 3600 * 1000;
  const now = Date.now();
  const employees = Array.from({ length: count }, (_, i) => {
    const id = nextId();
    const roll = i % 10;
    return {
      id,
      email: `employee-${i}-${id.toLowerCase()}@bench.example`,
      department: DEPARTMENTS[(i * 7) % DEPARTMENTS.length] ?? 'engineering',
      hiredAt: new Date(now - Math.floor((((i * 7919) % count) / count) * 10 * yearMs)).toISOString(),
      status: roll === 0 ? 'on_leave' : roll === 1 ? 'inactive' : 'active',
    };
  });
  const metadata = JSON.stringify({ tenantId, actor: 'bulk-import', occurredAt: new Date(now).toISOString() });
  let events = 0;
  const keyRows: string[] = [];
  function* eventRows() {
    for (const e of employees) {
      const stream = employeeStreamId(tenantId, e.id);
      const hired: Record<string, unknown> = {
        employeeId: e.id,
        email: e.email,
        firstName: 'Bench',
        lastName: `Person ${e.id.slice(-6)}`,
        department: e.department,
        status: 'active',
        hiredAt: e.hiredAt,
      };
      const key = sealed ? makeDataKey(keks, { tenantId, subjectId: e.id }) : undefined;
      if (key) {
        keyRows.push(`${tenantId}\t${e.id}\t${key.key.keyId}\t${key.kekId}\t${key.sealed}\n`);
        for (const field of HIRED_FIELDS)
          hired[field] = sealValue(key.key, String(hired[field]), fieldPlace(tenantId, stream, 'EmployeeHired', field));
      }
      yield `${stream}\t0\t${randomUUID()}\tEmployeeHired\t${copyField(JSON.stringify(hired))}\t${copyField(metadata)}\n`;
      if (e.status !== 'active') {
        const reason = key ? sealValue(key.key, 'imported', fieldPlace(tenantId, stream, 'EmployeeStatusChanged', 'reason')) : 'imported';
        const changed = { employeeId: e.id, from: 'active', to: e.status, reason, changedAt: e.hiredAt };
        yield `${stream}\t1\t${randomUUID()}\tEmployeeStatusChanged\t${copyField(JSON.stringify(changed))}\t${copyField(metadata)}\n`;
        events++;
      }
      const reserved = { employeeId: e.id };
      yield `${emailReservationStreamId(emailHash, tenantId, e.email)}\t0\t${randomUUID()}\tEmployeeEmailReserved\t${copyField(JSON.stringify(reserved))}\t${copyField(metadata)}\n`;
      events += 2;
    }
  }
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await client.query('begin');
    await pipeline(
      Readable.from(eventRows(), { objectMode: false }),
      client.query(copyFrom('copy es_events (stream_id, revision, event_id, type, data, metadata) from stdin')),
    );
    if (keyRows.length > 0) {
      await pipeline(
        Readable.from(keyRows, { objectMode: false }),
        client.query(copyFrom('copy personal_data_keys (tenant_id, subject_id, key_id, kek_id, sealed_key) from stdin')),
      );
    }
    await client.query('commit');
  } catch (error) {
    await client.query('rollback').catch(() => undefined);
    throw error;
  } finally {
    await client.end();
  }
  const ms = Date.now() - started;
  return { employees: count, events, sealed, ms, eventsPerSecond: Math.round(events / (ms / 1000)) };
}
