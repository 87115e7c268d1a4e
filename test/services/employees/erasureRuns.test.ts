import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import type { DataKeyStore } from '../../../shared/personal-data/dataKeys.ts';
import { erasurePorts } from '../../../services/employees/capability.ts';
import { employeeStreamId } from '../../../services/employees/contract.ts';
import type { ErasurePorts } from '../../../services/employees/erasure.ts';
import { eraseTenantEmployees, scanEmployees } from '../../../services/employees/erasureRuns.ts';
import { provisionTenant } from '../../support/auth.ts';
import { hire as hireThroughHandler } from '../../support/harness/changes.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { sealedEventStore, testEmailHash } from '../../support/personalData.ts';

/**
 * The bulk erasure runs below the ops commands, on the real log: a tenant's offboarding scans the
 * log for its hires while other tenants go on writing, and reports its progress to the end.
 */
let db: TestDatabase;
let log: EventStore;
let store: EventStore;
let keys: DataKeyStore;
let ports: ErasurePorts & { readonly isDestroyed: (tenantId: string, employeeId: string) => Promise<boolean> };

beforeAll(async () => {
  db = await createTestDatabase();
  log = createPostgresEventStore(db.pool);
  ({ store, keys } = sealedEventStore(log, db.pool));
  ports = {
    ...erasurePorts({ store, log, pool: db.pool, emailHash: testEmailHash, dataKeys: keys, logInDatabase: true }),
    isDestroyed: (tenantId, employeeId) => keys.isDestroyed(tenantId, employeeId),
  };
});
afterAll(async () => {
  await store?.close();
  await db?.drop();
});

/** Hired through the command handler (the harness's `hire`): the new employee's id. */
const hire = async (tenantId: string): Promise<string> => (await hireThroughHandler(store, tenantId, 'runs')).employeeId;

/**
 * The log, with another tenant hiring before every page is read: writes that never pause. A scan
 * that reads more pages than any finished scan needs is failed here rather than left to spin.
 */
function busyLog(otherTenantId: string): EventStore {
  let reads = 0;
  return {
    ...log,
    readAll: async (options) => {
      if (++reads > 50) throw new Error('the scan kept reading while other tenants wrote');
      await hire(otherTenantId);
      return log.readAll(options);
    },
  };
}

describe('when other tenants keep writing while a tenant is scanned', () => {
  it('the scan ends, with every hire of the tenant committed before it began', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const other = await provisionTenant(db.pool);
    const ids = [await hire(tenantId), await hire(tenantId)];

    const { hired } = await scanEmployees(busyLog(other.tenantId), tenantId);

    expect(hired).toEqual(ids.map((employeeId) => ({ tenantId, employeeId })));
  });

  it('the scan ends when the row at the head it started from is gone (rewritten away meanwhile)', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const id = await hire(tenantId);
    let reads = 0;
    let heads = 0;
    const rewritten: EventStore = {
      ...log,
      // The first head names a row deleted since: the log never reads up to it.
      headPosition: async () => {
        const real = await log.headPosition();
        return heads++ === 0 ? { commit: real.commit + 1_000n, prepare: 0n } : real;
      },
      readAll: async (options) => {
        if (++reads > 50) throw new Error('the scan kept reading towards a head that is gone');
        return log.readAll(options);
      },
    };

    const { hired } = await scanEmployees(rewritten, tenantId);

    expect(hired.map((h) => h.employeeId)).toEqual([id]);
  });

  it('the offboarding ends, and erases a hire of the tenant committed while it ran', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    const other = await provisionTenant(db.pool);
    const first = await hire(tenantId);
    let late: string | undefined;
    const running: typeof ports = {
      ...ports,
      log: busyLog(other.tenantId),
      // A session issued before the logins were disabled hires as the first person's erasure starts.
      store: {
        ...store,
        readStream: async (streamId, options) => {
          if (streamId === employeeStreamId(tenantId, first)) late ??= await hire(tenantId);
          return store.readStream(streamId, options);
        },
      },
    };

    const counts = await eraseTenantEmployees(running, tenantId, 'spec');

    expect(counts).toMatchObject({ employees: 2, erased: 2, skipped: 0 });
    for (const id of [first, late ?? '']) {
      expect((await store.readStream(employeeStreamId(tenantId, id))).map((e) => e.type)).toContain('EmployeeErased');
    }
  });
});

describe('when an offboarding is resumed after an earlier run finished some people', () => {
  it('reports its progress up to the whole total, the skipped included', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    await hire(tenantId);
    await hire(tenantId);
    await eraseTenantEmployees(ports, tenantId, 'spec');
    await hire(tenantId);

    const progress: Array<[number, number]> = [];
    const counts = await eraseTenantEmployees(ports, tenantId, 'spec', (done, total) => progress.push([done, total]));

    expect(counts).toMatchObject({ employees: 3, erased: 1, skipped: 2 });
    expect(progress.at(-1)).toEqual([3, 3]);
    const done = progress.map(([n]) => n);
    expect(done).toEqual([...done].sort((a, b) => a - b));
  });
});
