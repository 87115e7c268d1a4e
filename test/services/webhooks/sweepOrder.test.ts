import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createChangesHarness, hire, type ChangesHarness } from '../../support/harness/changes.ts';
import { authHeaders } from '../../support/auth.ts';
import { webhooksCapability } from '../../../services/webhooks/capability.ts';
import { dueEndpoints } from '../../../services/webhooks/lease.ts';
import { createSecretBox } from '../../../services/webhooks/secrets.ts';

/** The sweep's order: no dispatcher runs here, so what is due stays due. */
let h: ChangesHarness;
beforeAll(async () => {
  h = await createChangesHarness((db) =>
    webhooksCapability({ pool: db.pool, secrets: createSecretBox(randomBytes(32)), targets: { allowHosts: ['127.0.0.1'] } }),
  );
});
afterAll(() => h.close());

async function tenantWithEndpoints(count: number) {
  const { tenant } = await h.tenant();
  const headers = await authHeaders(h.auth, tenant, 'admin');
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const response = await h.app.inject({
      method: 'POST',
      url: '/v1/webhooks',
      headers,
      payload: { url: `http://127.0.0.1:9/hook?n=${i}`, events: ['employee.hired'] },
    });
    ids.push(response.json<{ id: string }>().id);
  }
  await hire(h.store, tenant.tenantId, 'due');
  return { tenantId: tenant.tenantId, ids };
}

describe('when one tenant has many endpoints due and others have one each', () => {
  it("takes every tenant's first before anyone's second", async () => {
    // The busy tenant registers first, so a sweep in table order would list its endpoints first.
    const busy = await tenantWithEndpoints(8);
    const quiet = [await tenantWithEndpoints(1), await tenantWithEndpoints(1)];
    const all = await (async () => {
      for (;;) {
        const due = await dueEndpoints(h.db.pool, 100);
        if (due.length === 10) return due;
        await new Promise((r) => setTimeout(r, 50)); // the projector is still applying the hires
      }
    })();
    const firstTurn = await dueEndpoints(h.db.pool, 3);
    expect(new Set(firstTurn.map((d) => d.tenantId))).toEqual(new Set([busy.tenantId, ...quiet.map((q) => q.tenantId)]));
    // Then the busy tenant's others, in the order they were registered.
    expect(all.slice(3).map((d) => d.id)).toEqual(busy.ids.filter((id) => !firstTurn.some((d) => d.id === id)));
    // One tenant's due endpoints, for the drain that lets go of its share.
    expect((await dueEndpoints(h.db.pool, 100, { tenantId: busy.tenantId })).map((d) => d.id)).toEqual(busy.ids);
  });
});
