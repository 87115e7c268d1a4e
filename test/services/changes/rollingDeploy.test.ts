import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { runProjection } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { changesProjection } from '../../../projections/changes/changesProjection.ts';
import { inFeedOrder, latestChange, readChanges } from '../../../projections/changes/queries.ts';
import { sql } from '../../../shared/db/pool.ts';
import { z } from 'zod';
import { START } from '../../../shared/event-store/port.ts';
import { insertEndpoint } from '../../../services/webhooks/endpoints.ts';
import { dueEndpoints } from '../../../services/webhooks/lease.ts';
import { sqlAt } from '../../support/database.ts';
import { createChangesHarness, hire, logPositionsOf, type ChangesHarness } from '../../support/harness/changes.ts';
import { waitFor } from '../../support/waitFor.ts';

let h: ChangesHarness;
beforeAll(async () => {
  h = await createChangesHarness();
});
afterAll(async () => {
  await h?.close();
});

const names = (page: Awaited<ReturnType<typeof readChanges>>) => page.changes.map((c) => c.employee.firstName);

describe('during a rolling deploy onto `employees-changes` version 2 (apply order)', () => {
  it('the new readers serve the version-1 table in log order until the rebuild swaps in, and stored cursors carry on across the swap', async () => {
    const { tenant } = await h.tenant();
    const e = await hire(h.store, tenant.tenantId, 'roll');
    await e.rename('roll-1');
    await e.rename('roll-2');
    const log = await logPositionsOf(h.store, tenant.tenantId);
    expect(await waitForCheckpoint(h.db.pool, changesProjection.name, log.at(-1) ?? START, 10_000)).toBe(true);

    // The live model as version 1 left it: no `seq`, checkpoint at version 1.
    await h.projector.stop();
    await sqlAt(h.db.url, 'alter table employee_changes drop column seq');
    await sqlAt(h.db.url, `update projection_checkpoints set version = 1 where name = $1`, [changesProjection.name]);

    const all = await readChanges(h.db.pool, tenant.tenantId, START, 100);
    expect(names(all)).toEqual(['roll-0', 'roll-1', 'roll-2']);
    expect(all.changes.map((c) => c.position)).toEqual(log);
    const [first, , third] = log;
    if (!first || !third) throw new Error('three changes expected');
    const rest = await readChanges(h.db.pool, tenant.tenantId, first, 100);
    expect([rest.known, names(rest)]).toEqual([true, ['roll-1', 'roll-2']]);
    expect(await latestChange(h.db.pool, tenant.tenantId)).toEqual(third);
    const endpoint = await insertEndpoint(h.db.pool, {
      id: randomUUID(),
      tenantId: tenant.tenantId,
      url: 'https://receiver.example/hooks',
      eventTypes: ['employee.details_changed'],
      secretSealed: 'sealed',
      cursor: first,
    });
    expect((await dueEndpoints(h.db.pool, 10, endpoint.id)).map((d) => d.id)).toEqual([endpoint.id]);

    // The new projector rebuilds the current version (2 or later: with `seq`) and swaps it in; a
    // cursor stored before carries on.
    h.projector = runProjection(h.db.pool, h.store, changesProjection, { pollIntervalMs: 100 });
    await waitFor(async () =>
      (await readCheckpoint(h.db.pool, changesProjection.name))?.version === changesProjection.version ? true : undefined,
    );
    await e.rename('roll-3');
    const after = await waitFor(async () => {
      const page = await readChanges(h.db.pool, tenant.tenantId, third, 100);
      return page.changes.length > 0 ? page : undefined;
    });
    expect(names(after)).toEqual(['roll-3']);
    expect(names(await readChanges(h.db.pool, tenant.tenantId, START, 100))).toEqual(['roll-0', 'roll-1', 'roll-2', 'roll-3']);
    expect(await latestChange(h.db.pool, tenant.tenantId)).toEqual(after.changes[0]?.position);
    expect((await dueEndpoints(h.db.pool, 10, endpoint.id)).map((d) => d.id)).toEqual([endpoint.id]);
  });

  it('a read that falls back to log order just as version 2 swaps in runs again in apply order', async () => {
    const { tenant } = await h.tenant();
    await hire(h.store, tenant.tenantId, 'race');
    await waitFor(async () => ((await readChanges(h.db.pool, tenant.tenantId, START, 10)).changes.length > 0 ? true : undefined));
    await sqlAt(h.db.url, 'alter table employee_changes drop column seq');
    await sqlAt(h.db.url, `update projection_checkpoints set version = 1 where name = $1`, [changesProjection.name]);
    let reads = 0;
    const names = await inFeedOrder(h.db.pool, async (order) => {
      reads++;
      // Between the failed apply-order read and the log-order one, the swap commits (simulated:
      // the column back, the version moved, in one statement's time).
      if (reads === 2) {
        await sqlAt(h.db.url, 'alter table employee_changes add column seq bigint generated always as identity');
        await sqlAt(h.db.url, `update projection_checkpoints set version = 2 where name = $1`, [changesProjection.name]);
      }
      return h.db.pool.anyFirst(sql.type(z.object({ id: z.string() }))`
        select c.employee_id as id from employee_changes c where c.tenant_id = ${tenant.tenantId} order by ${order.orderBy}
      `);
    });
    expect(reads).toBe(3);
    expect(names).toHaveLength(1);
  });
});
