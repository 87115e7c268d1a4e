import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql, withTenant } from '../../../shared/db/pool.ts';
import { createUser } from '../../../services/auth/users.ts';
import { cutTenantAccess } from '../../../services/tenants/offboarding.ts';
import { unlessOffboarded } from '../../../services/tenants/offboardingLedger.ts';
import { provisionTenant } from '../../support/auth.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';

/**
 * A tenant's offboarding and a login being made for it at the same moment, on real PostgreSQL:
 * the login is either made first and forgotten by the offboarding, or refused after it.
 */
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const loginRow = z.object({ email: z.string(), disabled: z.boolean() });
const loginsOf = (tenantId: string) =>
  withTenant(db.pool, tenantId, (tx) =>
    tx.any(sql.type(loginRow)`select email, disabled_at is not null as disabled from users where tenant_id = ${tenantId}`),
  );

describe('when a login is being made while the tenant is offboarded', () => {
  it('makes the offboarding wait for it, then forgets it with the rest', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    // The login is being made (the lock held, the ledger read) when the offboarding starts.
    let inside!: () => void;
    const held = new Promise<void>((resolve) => (inside = resolve));
    let release!: () => void;
    const go = new Promise<void>((resolve) => (release = resolve));
    const making = unlessOffboarded(db.pool, tenantId, async (tx) => {
      inside();
      await go;
      return createUser(tx, { tenantId, email: 'racing@order.test', password: 'a racing password', role: 'admin' });
    });
    await held;
    let cutDone = false;
    const cut = cutTenantAccess(db.pool, { tenantId, offboardedAt: new Date().toISOString() }).then(() => (cutDone = true));
    await sleep(300);
    // The offboarding waits on the lock: it has neither recorded itself nor forgotten anything yet.
    expect(cutDone).toBe(false);
    release();
    expect((await making).offboarded).toBe(false);
    await cut;
    const logins = await loginsOf(tenantId);
    expect(logins.length).toBeGreaterThan(0);
    for (const login of logins) expect(login).toEqual({ email: expect.stringMatching(/^erased-.*@erased\.invalid$/), disabled: true });
  });

  it('makes nothing once the offboarding is recorded', async () => {
    const { tenantId } = await provisionTenant(db.pool);
    await cutTenantAccess(db.pool, { tenantId, offboardedAt: new Date().toISOString() });
    let ran = false;
    const made = await unlessOffboarded(db.pool, tenantId, async () => (ran = true));
    expect(made).toEqual({ offboarded: true });
    expect(ran).toBe(false);
  });
});
