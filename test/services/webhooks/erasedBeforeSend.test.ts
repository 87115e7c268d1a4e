import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { hire } from '../../support/harness/changes.ts';
import { sqlAt } from '../../support/database.ts';
import { waitFor } from '../../support/waitFor.ts';
import { useWebhooks } from '../../support/harness/webhooks.ts';
import { START_CURSOR } from '../../../services/changes/cursor.ts';

/**
 * A run reads its page of changes first and sends them one after the other; what it sends is the
 * feed as it is when each goes out, so an erasure in between reaches the changes still to be sent.
 */
const wh = useWebhooks();
const { admin } = wh;

type Body = { type: string; data: { employee: { email: string | null; firstName: string | null; lastName: string | null } } };

/** A receiver that holds its first answer until `release()`, so the test acts while the run is mid-page. */
async function startHeldReceiver() {
  const bodies: Body[] = [];
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      bodies.push(JSON.parse(Buffer.concat(chunks).toString('utf8')) as Body);
      const answer = () => res.writeHead(204).end();
      if (bodies.length === 1) void released.then(answer);
      else answer();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    bodies,
    release: () => release(),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe('when an employee is erased while a run is sending their changes', () => {
  it('sends the changes not yet out with the personal fields blanked, as the feed holds them then', async () => {
    const { tenant, headers } = await admin();
    const receiver = await startHeldReceiver();
    try {
      const e = await hire(wh.h.store, tenant.tenantId, 'erased-mid-run');
      await e.rename('erased-mid-run-1');
      await wh.h.feedCursors(headers, 2);
      // From the start: the run's first page holds both changes.
      const created = await wh.h.app.inject({
        method: 'POST',
        url: '/v1/webhooks',
        headers,
        payload: { url: receiver.url, events: ['employee.hired', 'employee.details_changed'], after: START_CURSOR },
      });
      expect(created.statusCode, created.body).toBe(201);

      await waitFor(() => receiver.bodies.length >= 1);
      expect(receiver.bodies[0]?.data.employee.firstName).toBe('erased-mid-run-0');
      // What the erasure does to the feed: every change of the person keeps no personal field.
      await sqlAt(
        wh.h.db.url,
        `update employee_changes set employee = employee || '{"email": null, "firstName": null, "lastName": null}'::jsonb
         where tenant_id = $1 and employee_id = $2`,
        [tenant.tenantId, e.employeeId],
      );
      receiver.release();

      await waitFor(() => receiver.bodies.length >= 2);
      expect(receiver.bodies[1]?.type).toBe('employee.details_changed');
      expect(receiver.bodies[1]?.data.employee).toMatchObject({ email: null, firstName: null, lastName: null });
    } finally {
      receiver.release();
      await receiver.close();
    }
  });
});
