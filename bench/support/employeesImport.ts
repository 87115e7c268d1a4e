/**
 * Bulk import, documented: for each employee an `EmployeeHired` event on its own stream, an
 * `EmployeeEmailReserved` event on its email's reservation stream (so uniqueness holds for
 * imported staff too) and, for 20%, an `EmployeeStatusChanged` (10% on_leave, 10% inactive),
 * written with COPY into es_events in ONE transaction: the import is all or
 * nothing, and the events become visible to projectors at once, in one commit.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { createEmailHash } from '../../shared/personal-data/emailHash.ts';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { monotonicFactory } from 'ulid';
import { emailReservationStreamId } from '../../services/employees/emailReservation.ts';
import { employeeStreamId } from '../../services/employees/contract.ts';

const DEPARTMENTS = ['engineering', 'sales', 'marketing', 'support', 'finance', 'hr', 'legal', 'operations', 'research', 'design'];

/** COPY text format: escape the characters COPY treats specially. */
const copyField = (value: string) => value.replace(/\\/g, '\\\\').replace(/\t/g, '\\t').replace(/\n/g, '\\n').replace(/\r/g, '\\r');

/**
 * Bulk import of `count` employees as events, in one transaction.
 * Returns the number of events written and how long it took.
 */
export async function importEmployees(databaseUrl: string, tenantId: string, count: number) {
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
  function* eventRows() {
    for (const e of employees) {
      const stream = employeeStreamId(tenantId, e.id);
      const hired = {
        employeeId: e.id,
        email: e.email,
        firstName: 'Bench',
        lastName: `Person ${e.id.slice(-6)}`,
        department: e.department,
        status: 'active',
        hiredAt: e.hiredAt,
      };
      yield `${stream}\t0\t${randomUUID()}\tEmployeeHired\t${copyField(JSON.stringify(hired))}\t${copyField(metadata)}\n`;
      if (e.status !== 'active') {
        const changed = { employeeId: e.id, from: 'active', to: e.status, reason: 'imported', changedAt: e.hiredAt };
        yield `${stream}\t1\t${randomUUID()}\tEmployeeStatusChanged\t${copyField(JSON.stringify(changed))}\t${copyField(metadata)}\n`;
        events++;
      }
      const reserved = { employeeId: e.id, email: e.email };
      yield `${emailReservationStreamId(createEmailHash(randomBytes(32)), tenantId, e.email)}\t0\t${randomUUID()}\tEmployeeEmailReserved\t${copyField(JSON.stringify(reserved))}\t${copyField(metadata)}\n`;
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
    await client.query('commit');
  } catch (error) {
    await client.query('rollback').catch(() => undefined);
    throw error;
  } finally {
    await client.end();
  }
  const ms = Date.now() - started;
  return { employees: count, events, ms, eventsPerSecond: Math.round(events / (ms / 1000)) };
}
