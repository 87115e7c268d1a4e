import { describe, expect, it } from 'vitest';
import { hire } from '../../support/harness/changes.ts';
import { sqlAt } from '../../support/database.ts';
import { waitFor } from '../../support/waitFor.ts';
import { useWebhooks } from '../../support/harness/webhooks.ts';
import { startReceiver } from '../../support/webhooks/receiver.ts';
import { START_CURSOR } from '../../../services/changes/cursor.ts';
import { recordErasure } from '../../../services/employees/erasureLedger.ts';

/**
 * A run reads its page of changes first and sends them one after the other; what it sends is the
 * person as they are when each goes out, so an erasure in between reaches the changes still to be
 * sent: once the feed is blanked, and already once the erasure is recorded (the changes projector
 * lagging, stopped, or not yet run on a restored database).
 */
// Attempts may take long here: the receiver holds its first answer while the test acts.
const HOLD_MS = 4_000;
/** Runs once at the dispatcher's next look-up of a host name, before it answers (then 127.0.0.1). */
let whileResolving: (() => Promise<unknown>) | undefined;
const wh = useWebhooks({
  dispatcher: {
    timeoutMs: 3 * HOLD_MS,
    targets: {
      // Plain http to a name is only allowed for a host listed.
      allowHosts: ['127.0.0.1', 'receiver.test'],
      resolver: async () => {
        const act = whileResolving;
        whileResolving = undefined;
        await act?.();
        return [{ address: '127.0.0.1', family: 4 }];
      },
    },
  },
});
const { admin } = wh;

type Body = { type: string; data: { employee: { email: string | null; firstName: string | null; lastName: string | null } } };

/** Two changes of one person in a run's first page; `erase` acts while the first is being answered. */
async function secondChangeSentAfter(label: string, erase: (tenantId: string, employeeId: string) => Promise<unknown>) {
  const { tenant, headers } = await admin();
  const receiver = await startReceiver(undefined, { delayMs: (n) => (n === 0 ? HOLD_MS : 0) });
  const body = (n: number) => JSON.parse(receiver.requests[n]?.body ?? 'null') as Body;
  try {
    const e = await hire(wh.h.store, tenant.tenantId, label);
    await e.rename(`${label}-1`);
    await wh.h.feedCursors(headers, 2);
    // From the start: the run's first page holds both changes.
    const created = await wh.h.app.inject({
      method: 'POST',
      url: '/v1/webhooks',
      headers,
      payload: { url: receiver.url, events: ['employee.hired', 'employee.details_changed'], after: START_CURSOR },
    });
    expect(created.statusCode, created.body).toBe(201);

    await waitFor(() => receiver.requests.length >= 1);
    expect(body(0).data.employee.firstName).toBe(`${label}-0`);
    await erase(tenant.tenantId, e.employeeId);
    expect(receiver.requests).toHaveLength(1);

    await waitFor(() => receiver.requests.length >= 2);
    expect(body(1).type).toBe('employee.details_changed');
    return body(1).data.employee;
  } finally {
    await receiver.close();
  }
}

describe('when an employee is erased while a run is sending their changes', () => {
  it('sends the changes not yet out with the personal fields blanked, as the feed holds them then', async () => {
    const sent = await secondChangeSentAfter('erased-mid-run', (tenantId, employeeId) =>
      // What the erasure does to the feed: every change of the person keeps no personal field.
      sqlAt(
        wh.h.db.url,
        `update employee_changes set employee = employee || '{"email": null, "firstName": null, "lastName": null}'::jsonb
         where tenant_id = $1 and employee_id = $2`,
        [tenantId, employeeId],
      ),
    );
    expect(sent).toMatchObject({ email: null, firstName: null, lastName: null });
  });

  it('sends them blanked as soon as the erasure is recorded, before the feed is', async () => {
    const sent = await secondChangeSentAfter('erased-feed-behind', (tenantId, employeeId) =>
      recordErasure(wh.h.db.pool, { tenantId, employeeId, erasedAt: new Date().toISOString() }),
    );
    expect(sent).toMatchObject({ email: null, firstName: null, lastName: null });
  });
});

describe('when an employee is erased while the run resolves the receiver of their change', () => {
  it('sends the change with the personal fields blanked: the change is read once the receiver is known', async () => {
    const { tenant, headers } = await admin();
    const receiver = await startReceiver();
    try {
      const created = await wh.h.app.inject({
        method: 'POST',
        url: '/v1/webhooks',
        headers,
        payload: { url: receiver.url, events: ['employee.hired'], after: START_CURSOR },
      });
      expect(created.statusCode, created.body).toBe(201);
      // The dispatcher reaches the receiver by a name, so every attempt looks it up first; the
      // first look-up records the erasure of the one person the tenant will have hired.
      const { id } = created.json<{ id: string }>();
      await sqlAt(wh.h.db.url, `update webhook_endpoints set url = replace(url, '127.0.0.1', 'receiver.test') where id = $1`, [id]);
      const hired: { employeeId?: string } = {};
      whileResolving = async () => {
        const { employeeId } = hired;
        if (employeeId === undefined) throw new Error('resolved before the hire');
        await recordErasure(wh.h.db.pool, { tenantId: tenant.tenantId, employeeId, erasedAt: new Date().toISOString() });
      };
      hired.employeeId = (await hire(wh.h.store, tenant.tenantId, 'erased-while-resolving')).employeeId;

      await waitFor(() => receiver.requests.length >= 1);
      expect(whileResolving).toBeUndefined();
      const sent = JSON.parse(receiver.requests[0]?.body ?? 'null') as Body;
      expect(sent.type).toBe('employee.hired');
      expect(sent.data.employee).toMatchObject({ email: null, firstName: null, lastName: null });
    } finally {
      await receiver.close();
    }
  });
});
