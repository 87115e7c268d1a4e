import { monotonicFactory } from 'ulid';
import { testEmailHash } from '../../support/personalData.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { changeEmployeeDetails, hireEmployee } from '../../../services/employees/commands.ts';
import { auditReservation, emailReservationStreamId, releaseEmail } from '../../../services/employees/emailReservation.ts';
import { employeesProjection } from '../../../projections/employees/employeesProjection.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import { ConflictError } from '../../../shared/errors.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { runOps } from '../../support/processes.ts';
import { provisionTenant } from '../../support/auth.ts';

/**
 * `ops employees check-emails`: the older two-step email protocol could free an address its
 * employee still had, and a hire could then take it too. The command finds both states, reserves
 * the free ones for their employee with `--repair`, and names the shared ones (real PostgreSQL,
 * the real CLI). The damage is made with the standalone `releaseEmail`, as that protocol did.
 */
const nextId = monotonicFactory();
let db: TestDatabase;
let store: EventStore;

const ops = (...args: string[]) => runOps(db.url, ...args);
const now = () => new Date().toISOString();
const ports = () => ({ store, assertRoleExists: async () => undefined, emailHash: testEmailHash });
const meta = (tenantId: string) => ({ tenantId, actor: 'spec', now: now() });

/** Hires someone with `email` in `tenantId` (the current protocol) and returns the id. */
async function hire(tenantId: string, email: string): Promise<string> {
  const employeeId = nextId();
  await hireEmployee(ports(), {
    type: 'HireEmployee',
    data: { employeeId, email, firstName: 'A', lastName: 'B' },
    metadata: meta(tenantId),
  });
  return employeeId;
}

/** Frees `email` while `employeeId` still has it, as the older two-step protocol could. */
const free = (tenantId: string, employeeId: string, email: string) =>
  releaseEmail(store, { emailHash: testEmailHash, tenantId, email, employeeId, now: now(), metadata: { tenantId } });

const moveTo = (tenantId: string, employeeId: string, email: string) =>
  changeEmployeeDetails(ports(), employeeId, { type: 'ChangeEmployeeDetails', data: { email }, metadata: meta(tenantId) });

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool);
});
afterAll(async () => {
  await store?.close();
  await db?.drop();
});

describe('when addresses were left free or shared by the older email protocol', () => {
  it('reports them, reserves the free ones with --repair, and leaves the shared ones to a person', { timeout: 120_000 }, async () => {
    const { tenantId, slug } = await provisionTenant(db.pool);
    const a = await hire(tenantId, 'x@example.test');
    await free(tenantId, a, 'x@example.test'); // A has x, x is free
    const b = await hire(tenantId, 'y@example.test');
    await free(tenantId, b, 'y@example.test');
    await hire(tenantId, 'Y@example.test'); // C took y: B and C both have it
    const d = await hire(tenantId, 'z@example.test'); // fine
    // An email change of the current protocol keeps it right.
    await moveTo(tenantId, d, 'w@example.test');
    await replayProjection(db.pool, store, employeesProjection);

    const checked = await ops('employees', 'check-emails', '--tenant', slug);
    expect(checked.code, checked.stderr).toBe(1);
    expect(
      checked.stdout
        .split('\n')
        .filter((l) => /^(missing|shared)/.test(l))
        .sort(),
    ).toEqual([`missing\t${tenantId}\t${a}\tx@example.test`, `shared\t${tenantId}\t${b}\ty@example.test`]);
    expect(checked.stdout).toContain('4 employees: ok 2, repaired 0, missing 1, shared 1, busy 0, gone 0');

    const repaired = await ops('employees', 'check-emails', '--tenant', slug, '--repair');
    expect(repaired.code, repaired.stderr).toBe(1); // the shared address is left
    expect(repaired.stdout).toContain(`repaired\t${tenantId}\t${a}\tx@example.test`);
    expect(repaired.stdout).toContain('4 employees: ok 2, repaired 1, missing 0, shared 1, busy 0, gone 0');
    await expect(hire(tenantId, 'X@example.test')).rejects.toThrow(ConflictError);

    const again = await ops('employees', 'check-emails', '--tenant', slug);
    expect(again.stdout).toContain('4 employees: ok 3, repaired 0, missing 0, shared 1, busy 0, gone 0');
    await expect(ops('employees', 'check-emails', '--tenant', 'no-such-tenant')).resolves.toMatchObject({
      code: 1,
      stderr: 'error: No tenant no-such-tenant\n',
    });
  });
});

describe('when the address changes while --repair reserves it', () => {
  /** The store, with `before` run once just before the next append to `streamId`. */
  const interceptedBefore = (streamId: string, before: () => Promise<unknown>): EventStore => {
    let armed = true;
    return {
      ...store,
      append: async (id, events, options) => {
        if (armed && id === streamId) {
          armed = false;
          await before();
        }
        return store.append(id, events, options);
      },
      readStream: (id, options) => store.readStream(id, options),
    };
  };

  it('a concurrent reservation wins: the repair appends nothing and says busy', { timeout: 60_000 }, async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const employeeId = await hire(tenantId, 'r@example.test');
    await free(tenantId, employeeId, 'r@example.test');
    const streamId = emailReservationStreamId(testEmailHash, tenantId, 'r@example.test');
    // Just before the repair's append, the same address is reserved again (here for the employee itself).
    const racing = interceptedBefore(streamId, () =>
      store.append(streamId, [{ id: crypto.randomUUID(), type: 'EmployeeEmailReserved', data: { employeeId, email: 'r@example.test' } }]),
    );
    const audit = await auditReservation(
      racing,
      { emailHash: testEmailHash, tenantId, employeeId, now: now(), metadata: { tenantId } },
      { repair: true },
    );
    expect(audit).toEqual({ outcome: 'busy', email: 'r@example.test' });
    expect((await store.readStream(streamId)).map((e) => e.type)).toEqual([
      'EmployeeEmailReserved',
      'EmployeeEmailReleased',
      'EmployeeEmailReserved',
    ]);
  });

  it('an employee who moved to another address meanwhile does not keep the old one', { timeout: 60_000 }, async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const employeeId = await hire(tenantId, 'm@example.test');
    await free(tenantId, employeeId, 'm@example.test');
    const streamId = emailReservationStreamId(testEmailHash, tenantId, 'm@example.test');
    // Just before the repair's append, the employee moves to n@ (its change finds m@ not its own: nothing released).
    const moving = interceptedBefore(streamId, () => moveTo(tenantId, employeeId, 'n@example.test'));
    const audit = await auditReservation(
      moving,
      { emailHash: testEmailHash, tenantId, employeeId, now: now(), metadata: { tenantId } },
      { repair: true },
    );
    expect(audit).toEqual({ outcome: 'busy', email: 'm@example.test' });
    expect((await store.readStream(streamId)).map((e) => e.type).at(-1)).toBe('EmployeeEmailReleased');
    // m@ is free for a new hire at once (not after the 30-s orphan grace).
    await hire(tenantId, 'm@example.test');
  });
});
