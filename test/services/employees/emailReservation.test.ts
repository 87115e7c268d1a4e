import { randomUUID } from 'node:crypto';
import { testEmailHash } from '../../support/personalData.ts';
import { describe, expect, it } from 'vitest';
import { monotonicFactory } from 'ulid';
import { useTestEventStore } from '../../support/database.ts';
import { ConflictError } from '../../../shared/errors.ts';
import { emailReservationStreamId, releaseEmail, reserveEmail } from '../../../services/employees/emailReservation.ts';
import { changeEmployeeDetails, hireEmployee } from '../../../services/employees/commands.ts';
import type { CommandMetadata } from '../../../services/employees/decide.ts';

/** The reservation streams on the PostgreSQL adapter: release, takeover, orphans. */
const fixture = useTestEventStore();
const nextId = monotonicFactory();

const at = (offsetMs: number) => new Date(Date.now() + offsetMs).toISOString();
const reservation = (tenantId: string, email: string, employeeId: string, now = at(0)) => ({
  emailHash: testEmailHash,
  tenantId,
  email,
  employeeId,
  now,
  metadata: { tenantId },
});
const ports = () => ({ store: fixture.store, assertRoleExists: async () => undefined, emailHash: testEmailHash });
const meta = (tenantId: string, now = at(0)): CommandMetadata => ({ tenantId, actor: 'spec', now });
const hire = (tenantId: string, email: string, now = at(0)) =>
  hireEmployee(ports(), {
    type: 'HireEmployee',
    data: { employeeId: nextId(), email, firstName: 'A', lastName: 'B' },
    metadata: meta(tenantId, now),
  });

describe('when an address is reserved', () => {
  it('refuses another employee, and lets the holder reserve it again', async () => {
    const tenantId = randomUUID();
    const holder = nextId();
    await reserveEmail(fixture.store, reservation(tenantId, 'x@example.test', holder));
    await expect(reserveEmail(fixture.store, reservation(tenantId, 'X@EXAMPLE.TEST', nextId()))).rejects.toThrow(ConflictError);
    await expect(reserveEmail(fixture.store, reservation(tenantId, 'x@example.test', holder))).resolves.toBeNull();
  });

  it('is taken over at its exact revision once released', async () => {
    const tenantId = randomUUID();
    const first = nextId();
    await reserveEmail(fixture.store, reservation(tenantId, 'y@example.test', first));
    await releaseEmail(fixture.store, reservation(tenantId, 'y@example.test', first));
    await reserveEmail(fixture.store, reservation(tenantId, 'y@example.test', nextId()));
    const events = await fixture.store.readStream(emailReservationStreamId(testEmailHash, tenantId, 'y@example.test'));
    expect(events.map((e) => e.type)).toEqual(['EmployeeEmailReserved', 'EmployeeEmailReleased', 'EmployeeEmailReserved']);
  });
});

describe('when a reservation is orphaned', () => {
  it('is not taken over while a command could still be in flight', async () => {
    const tenantId = randomUUID();
    await reserveEmail(fixture.store, reservation(tenantId, 'z@example.test', nextId())); // never hired
    await expect(hire(tenantId, 'z@example.test', at(1_000))).rejects.toThrow(ConflictError);
  });

  it('is taken over when its owner was never hired (crash between the appends)', async () => {
    const tenantId = randomUUID();
    await reserveEmail(fixture.store, reservation(tenantId, 'w@example.test', nextId())); // never hired
    const result = await hire(tenantId, 'w@example.test', at(60_000));
    expect(result.state.kind).toBe('hired');
  });

  it('is taken over when its owner moved to another address without releasing it (crash before the release)', async () => {
    const tenantId = randomUUID();
    const owner = await hire(tenantId, 'v@example.test');
    const ownerId = owner.state.kind === 'hired' ? owner.state.id : '';
    // The change without its release: the employee stream moves on, the reservation stays.
    await reserveEmail(fixture.store, reservation(tenantId, 'v2@example.test', ownerId));
    await changeEmployeeDetails(ports(), ownerId, {
      type: 'ChangeEmployeeDetails',
      data: { email: 'v2@example.test' },
      metadata: meta(tenantId),
    });
    await reserveEmail(fixture.store, reservation(tenantId, 'v@example.test', ownerId)); // re-held, as if never released
    await expect(hire(tenantId, 'v@example.test', at(1_000))).rejects.toThrow(ConflictError);
    expect((await hire(tenantId, 'v@example.test', at(60_000))).state.kind).toBe('hired');
  });
});
