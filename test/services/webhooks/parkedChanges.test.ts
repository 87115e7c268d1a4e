import { describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { hire } from '../../support/harness/changes.ts';
import { waitFor } from '../../support/waitFor.ts';
import { dueEndpoints } from '../../../services/webhooks/lease.ts';
import { decodeCursor, encodeCursor } from '../../../services/changes/cursor.ts';
import { changesProjection } from '../../../projections/changes/changesProjection.ts';
import { listParkedEvents, retryParkedEvents } from '../../../shared/projections/parking.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import { sql } from '../../../shared/db/pool.ts';
import { START, comparePositions } from '../../../shared/event-store/port.ts';
import { sqlAt } from '../../support/database.ts';
import { startReceiver } from '../../support/webhooks/receiver.ts';
import { useWebhooks } from '../../support/harness/webhooks.ts';

/** A change parked by the change-feed projection reaches feed readers and webhook endpoints once it is applied after the fix. */
const wh = useWebhooks();
const { admin, read, register } = wh;

describe('when a change is parked and applied after the fix, by `projections retry` or by a rebuild', () => {
  const applyAfterFix = {
    retry: async () =>
      expect(await retryParkedEvents(wh.h.db.pool, changesProjection, { employee_changes: sql.identifier(['employee_changes']) })).toEqual({
        retried: 2,
        stillParked: 0,
      }),
    // A rebuild (here `projections replay`; a version bump does the same) applies the events
    // parked in the live model last, in its swap.
    rebuild: async () => expect((await replayProjection(wh.h.db.pool, wh.h.store, changesProjection)).parked).toBe(0),
  };
  it.each(['retry', 'rebuild'] as const)(
    '%s: feed readers and webhook endpoints already past its log position get it next, then its stream’s later change, once each',
    async (mode) => {
      const { tenant, headers } = await admin();
      const receiver = await startReceiver();
      // The "bug": the feed's table refuses one employee state, so applying the change fails
      // deterministically (23514) and the runner parks it, and the later change of its stream.
      const constraint = `poison_${randomBytes(4).toString('hex')}`;
      try {
        const endpoint = await register(headers, receiver.url);
        const x = await hire(wh.h.store, tenant.tenantId, 'x');
        const y = await hire(wh.h.store, tenant.tenantId, 'y');
        await wh.h.feedCursors(headers, 2);
        await sqlAt(
          wh.h.db.url,
          `alter table employee_changes add constraint ${constraint} check (employee->>'firstName' <> 'poison-${tenant.tenantId}') not valid`,
        );
        await x.rename(`poison-${tenant.tenantId}`);
        await x.rename('x-after');
        await y.rename('y-after');
        const parked = await waitFor(async () => {
          const rows = await listParkedEvents(wh.h.db.pool, changesProjection.name, { status: 'parked' });
          return rows.length >= 2 ? rows : undefined;
        });
        expect(parked.map((p) => p.tenantId)).toEqual([tenant.tenantId, tenant.tenantId]);

        // A reader (and the endpoint) past both parked changes' log positions: x, y hired, y-after.
        const seen = await wh.h.feedCursors(headers, 3);
        const before = await read(headers, 'limit=1000');
        expect(before.data.map((c) => c.employee.firstName)).toEqual(['x-0', 'y-0', 'y-after']);
        await waitFor(() => receiver.acknowledged().length >= 3);
        const parkedPositions = parked.map((p) => encodeCursor(p.event.position));
        const readerAt = decodeCursor(before.next) ?? START;
        expect(parked.every((p) => comparePositions(p.event.position, readerAt) < 0)).toBe(true);
        // It waits at the end of the feed while the operator fixes and retries.
        const waiting = read(headers, `after=${before.next}&wait=20`);

        await sqlAt(wh.h.db.url, `alter table employee_changes drop constraint ${constraint}`);
        await applyAfterFix[mode]();

        const woken = await waiting;
        expect(woken.data.map((c) => [c.cursor, c.type, c.employeeId, c.employee.firstName])).toEqual([
          [parkedPositions[0], 'employee.details_changed', x.employeeId, `poison-${tenant.tenantId}`],
          [parkedPositions[1], 'employee.details_changed', x.employeeId, 'x-after'],
        ]);
        expect((await read(headers, `after=${woken.next}`)).data).toEqual([]);
        // From the start: every change once, in the order applied.
        expect((await read(headers, 'limit=1000')).data.map((c) => c.cursor)).toEqual([...seen, ...parkedPositions]);
        await waitFor(() => receiver.acknowledged().length >= 5);
        expect(receiver.acknowledged()).toEqual([...seen, ...parkedPositions]);
        // A new endpoint starts after the last change applied, not at the newest log position.
        const later = await register(headers, receiver.url);
        expect(later.cursor).toBe(parkedPositions[1]);
        expect(await listParkedEvents(wh.h.db.pool, changesProjection.name, { status: 'parked' })).toEqual([]);

        // A rebuild later applies them at the same point again: the order and every cursor into it
        // stay as they were, and the endpoint has nothing new (no y-after again).
        const applied = (await read(headers, 'limit=1000')).data.map((c) => c.cursor);
        await replayProjection(wh.h.db.pool, wh.h.store, changesProjection);
        expect((await read(headers, 'limit=1000')).data.map((c) => c.cursor)).toEqual(applied);
        expect((await read(headers, `after=${before.next}`)).data.map((c) => c.cursor)).toEqual(parkedPositions);
        expect(await dueEndpoints(wh.h.db.pool, 10, endpoint.id)).toEqual([]);
      } finally {
        await sqlAt(wh.h.db.url, `alter table employee_changes drop constraint if exists ${constraint}`);
        await receiver.close();
      }
    },
  );
});
