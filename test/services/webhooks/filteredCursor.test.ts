import { describe, expect, it } from 'vitest';
import { hire } from '../../support/harness/changes.ts';
import { sqlAt } from '../../support/database.ts';
import { waitFor } from '../../support/waitFor.ts';
import { startReceiver } from '../../support/webhooks/receiver.ts';
import { useWebhooks } from '../../support/harness/webhooks.ts';

/**
 * An endpoint that takes a rare type moves its cursor past the changes it does not take, so
 * neither the sweep nor a run reads them again. The window is 50 changes here (1,000 by default).
 */
const WINDOW = 50;
const wh = useWebhooks({ dispatcher: { scanWindow: WINDOW } });
const { admin, register } = wh;

type Endpoint = { id: string; cursor: string };
const cursorOf = async (headers: Record<string, string>, id: string) =>
  (await wh.h.app.inject({ method: 'GET', url: '/v1/webhooks', headers })).json<{ data: Endpoint[] }>().data.find((e) => e.id === id)
    ?.cursor;

describe('when many changes of types an endpoint does not take come after the last it took', () => {
  it('moves its cursor past them, and still delivers the next one it takes', async () => {
    const { tenant, headers } = await admin();
    const receiver = await startReceiver();
    try {
      const endpoint = await register(headers, receiver.url, ['employee.hired']);
      const e = await hire(wh.h.store, tenant.tenantId, 'rare');
      await waitFor(() => receiver.acknowledged().length >= 1);
      const unwanted = 3 * WINDOW + 20;
      for (let i = 1; i <= unwanted; i++) await e.rename(`rare-${i}`);
      const cursors = await wh.h.feedCursors(headers, 1 + unwanted);
      // Fewer than a window of them stay after the cursor (a window's worth makes the endpoint
      // due, and its run moves past all it finds): it is not left at the last change it took.
      const moved = await waitFor(async () => {
        const cursor = await cursorOf(headers, endpoint.id);
        const at = cursors.indexOf(cursor ?? '');
        return at >= cursors.length - WINDOW ? at : undefined;
      });
      expect(moved).toBeGreaterThan(unwanted - WINDOW);
      expect(receiver.requests).toHaveLength(1); // none of those went out

      await hire(wh.h.store, tenant.tenantId, 'rare-again');
      const all = await wh.h.feedCursors(headers, 2 + unwanted);
      await waitFor(() => receiver.acknowledged().length >= 2);
      expect(receiver.acknowledged()).toEqual([all[0], all.at(-1)]);
      // Past everything it looked at: the head.
      await waitFor(async () => (await cursorOf(headers, endpoint.id)) === all.at(-1));
    } finally {
      await receiver.close();
    }
  });
});

describe('when the change an endpoint was retrying is no longer in the feed and its cursor moves past others', () => {
  it('forgets the retry state, so the next change it takes starts a schedule of its own', async () => {
    const { tenant, headers } = await admin();
    const receiver = await startReceiver();
    try {
      const endpoint = await register(headers, receiver.url, ['employee.hired']);
      const e = await hire(wh.h.store, tenant.tenantId, 'retried');
      const [hired] = await wh.h.feedCursors(headers, 1);
      // Until the run that delivered it has recorded the success and let the endpoint go, it
      // could overwrite the state set below.
      await waitFor(async () => (await cursorOf(headers, endpoint.id)) === hired);
      await waitFor(async () => {
        const [lease] = await sqlAt<{ lease_token: string | null }>(
          wh.h.db.url,
          'select lease_token::text from webhook_endpoints where id = $1',
          [endpoint.id],
        );
        return lease?.lease_token === null;
      });
      // As a rebuild leaves it when it parked the change being retried: three failures recorded,
      // the retry due, and no change of its types after the cursor.
      await sqlAt(
        wh.h.db.url,
        `update webhook_endpoints set failed_attempts = 3, retrying_since = now() - interval '1 hour', next_attempt_at = now() where id = $1`,
        [endpoint.id],
      );
      for (let i = 1; i <= WINDOW; i++) await e.rename(`retried-${i}`);
      const cursors = await wh.h.feedCursors(headers, 1 + WINDOW);
      // Any move will do: the move and the state's reset are one statement. (A run that scans while
      // the renames are still being projected moves it part of the way and leaves fewer than a
      // window behind it, which is not due again.)
      await waitFor(async () => cursors.indexOf((await cursorOf(headers, endpoint.id)) ?? '') > 0);
      const [state] = await sqlAt<{ failed_attempts: number; retrying_since: string | null; next_attempt_at: string | null }>(
        wh.h.db.url,
        `select failed_attempts, retrying_since, next_attempt_at from webhook_endpoints where id = $1`,
        [endpoint.id],
      );
      expect(state).toEqual({ failed_attempts: 0, retrying_since: null, next_attempt_at: null });
      expect(receiver.requests).toHaveLength(1);
    } finally {
      await receiver.close();
    }
  });
});
