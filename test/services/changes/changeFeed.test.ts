import pg from 'pg';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatPosition } from '../../../shared/event-store/port.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { changesProjection } from '../../../projections/changes/changesProjection.ts';
import { readChanges } from '../../../projections/changes/queries.ts';
import { parkEvent, resolveParkedEvents } from '../../../shared/projections/parking.ts';
import { insertEndpoint } from '../../../services/webhooks/endpoints.ts';
import { dueEndpoints } from '../../../services/webhooks/lease.ts';
import { sqlAt } from '../../support/database.ts';
import { staysTrue } from '../../support/staysTrue.ts';
import { decodeCursor, encodeCursor } from '../../../services/changes/cursor.ts';
import { employeeStreamId } from '../../../services/employees/contract.ts';
import { expectProblem } from '../../support/harness/employees.ts';
import { createChangesHarness, hire, logPositionsOf, type ChangesHarness } from '../../support/harness/changes.ts';
import { waitFor } from '../../support/waitFor.ts';

type Change = {
  cursor: string;
  type: string;
  employeeId: string;
  occurredAt: string;
  employee: { id: string; firstName: string; status: string };
};
type Page = { data: Change[]; next: string; hasMore: boolean };

let h: ChangesHarness;
beforeAll(async () => {
  h = await createChangesHarness();
});
afterAll(async () => {
  await h?.close();
});

const read = async (headers: Record<string, string>, query: string) => {
  const response = await h.app.inject({ method: 'GET', url: `/v1/employees/changes?${query}`, headers });
  if (response.statusCode !== 200) throw new Error(`${response.statusCode} ${response.body}`);
  return response.json<Page>();
};

describe('when 8 writers change employees of 2 tenants while a client follows the feed with limit=37', () => {
  it('the client sees every change of its tenant exactly once, in log order, and none of the other tenant', async () => {
    const [a, b] = [await h.tenant(), await h.tenant()];
    const WRITERS = 8;
    const PER_WRITER = 500;
    let writing = true;
    const writers = Array.from({ length: WRITERS }, async (_, w) => {
      const tenantId = (w % 2 === 0 ? a : b).tenant.tenantId;
      let current = await hire(h.store, tenantId, `w${w}`);
      for (let i = 1; i < PER_WRITER; i++) {
        if (i % 50 === 0) current = await hire(h.store, tenantId, `w${w}`);
        else await current.rename(`w${w}-${i}`);
      }
    });
    const allWritten = Promise.all(writers).finally(() => (writing = false));

    const seen: Change[] = [];
    let after: string | undefined;
    const expectedCount = (WRITERS / 2) * PER_WRITER;
    const follow = (async () => {
      while (seen.length < expectedCount) {
        const page = await read(a.headers, `limit=37${after ? `&after=${after}` : ''}${writing ? '' : '&wait=2'}`);
        expect(page.data.length).toBeLessThanOrEqual(37);
        seen.push(...page.data);
        after = page.next;
        if (!writing && page.data.length === 0 && !page.hasMore) {
          // Writers done: the projection must still reach everything; the long-poll waits for it.
          const head = await logPositionsOf(h.store, a.tenant.tenantId);
          if (seen.length >= head.length) break;
        }
      }
    })();
    await allWritten;
    await follow;

    const expected = await logPositionsOf(h.store, a.tenant.tenantId);
    expect(expected).toHaveLength(expectedCount);
    const got = seen.map((c) => decodeCursor(c.cursor));
    expect(got.map((p) => (p ? formatPosition(p) : 'bad'))).toEqual(expected.map(formatPosition));
    expect(new Set(seen.map((c) => c.cursor)).size).toBe(expectedCount);
    // One more read after the end: nothing new, `next` stays put.
    const tail = await read(a.headers, `limit=37&after=${after}`);
    expect(tail).toEqual({ data: [], next: after, hasMore: false });
    // The state after each change: per employee, names follow the writes in order.
    const hired = seen.filter((c) => c.type === 'employee.hired');
    expect(hired).toHaveLength((WRITERS / 2) * (PER_WRITER / 50));
    for (const change of seen) {
      if (change.type === 'employee.details_changed') expect(change.employee.firstName).toMatch(/^w\d-\d+$/);
    }
    const byEmployee = new Map<string, number[]>();
    for (const c of seen) {
      if (c.type !== 'employee.details_changed') continue;
      const n = Number(c.employee.firstName.split('-')[1]);
      byEmployee.set(c.employeeId, [...(byEmployee.get(c.employeeId) ?? []), n]);
    }
    for (const ns of byEmployee.values()) expect(ns).toEqual([...ns].sort((x, y) => x - y));
  }, 120_000);
});

describe('when a change commits after a later one (out of order)', () => {
  it('the feed waits for it and shows both in log order, never skipping the earlier one', async () => {
    const { tenant, headers } = await h.tenant();
    const first = await hire(h.store, tenant.tenantId, 'ooo');
    const second = await hire(h.store, tenant.tenantId, 'ooo');
    const start = await waitFor(async () => {
      const page = await read(headers, 'limit=10');
      return page.data.length === 2 ? page.next : undefined;
    });
    // A writer that takes its transaction id and then stalls before committing.
    const slow = new pg.Client({ connectionString: h.db.url });
    await slow.connect();
    try {
      await slow.query('begin');
      await slow.query(
        `select * from es_append($1, 'any', array[$2]::uuid[], array['EmployeeDetailsChanged'], array[$3]::jsonb[], array[$4]::jsonb[])`,
        [
          employeeStreamId(tenant.tenantId, first.employeeId),
          randomUUID(),
          JSON.stringify({ employeeId: first.employeeId, firstName: 'slow' }),
          JSON.stringify({ tenantId: tenant.tenantId }),
        ],
      );
      await second.rename('fast'); // commits first, but is later in the log
      const during = await read(headers, `limit=10&after=${start}`);
      expect(during.data).toEqual([]); // the fast one is held back behind the open transaction
      await slow.query('commit');
    } finally {
      await slow.end();
    }
    const page = await read(headers, `limit=10&after=${start}&wait=10`);
    const all = page.data.length === 2 ? page.data : [...page.data, ...(await read(headers, `limit=10&after=${page.next}&wait=10`)).data];
    expect(all.map((c) => c.employee.firstName)).toEqual(['slow', 'fast']);
  });
});

describe('when the client long-polls with wait', () => {
  it('answers as soon as a change commits, not at the end of the wait', async () => {
    const { tenant, headers } = await h.tenant();
    const started = Date.now();
    let answered = false;
    const pending = read(headers, 'limit=5&wait=20').finally(() => (answered = true));
    // The request is waiting, with nothing to answer yet, before the change commits.
    expect(await staysTrue(() => !answered, 300)).toBe(true);
    await hire(h.store, tenant.tenantId, 'poll');
    const page = await pending;
    expect(page.data).toHaveLength(1);
    expect(page.data[0]?.type).toBe('employee.hired');
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('returns an empty page with the same cursor when nothing comes', async () => {
    const { headers } = await h.tenant();
    const started = Date.now();
    const page = await read(headers, 'limit=5&wait=1');
    expect(page).toEqual({ data: [], next: encodeCursor({ commit: 0n, prepare: 0n }), hasMore: false });
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
  });
});

describe('when the cursor is malformed, unknown or another tenant’s', () => {
  it('answers 400 problems', async () => {
    const a = await h.tenant();
    const b = await h.tenant();
    await hire(h.store, b.tenant.tenantId, 'other');
    const theirs = await waitFor(async () => (await read(b.headers, 'limit=1')).data[0]?.cursor);
    for (const after of ['nope', '%00', 'YWJj', encodeCursor({ commit: 999_999_999n, prepare: 1n }), theirs, 'x'.repeat(65)]) {
      const response = await h.app.inject({ method: 'GET', url: `/v1/employees/changes?after=${after}`, headers: a.headers });
      expectProblem(response, 400);
    }
    for (const query of ['limit=0', 'limit=1001', 'wait=31', 'limit=abc', 'limit=%2B1', 'limit=1e1', 'wait=0x1', 'since=1']) {
      expectProblem(await h.app.inject({ method: 'GET', url: `/v1/employees/changes?${query}`, headers: a.headers }), 400);
    }
  });

  it('a feed reader and a webhook endpoint whose cursor names a change no longer in the model carry on after the last change before it, never from the start', async () => {
    // A rebuild that parks an event the model before it had applied leaves such a cursor.
    const { tenant, headers } = await h.tenant();
    const e = await hire(h.store, tenant.tenantId, 'gone');
    for (let i = 1; i <= 3; i++) await e.rename(`gone-${i}`);
    const cursors = await h.feedCursors(headers, 4);
    // The newest change is gone: nothing comes after its cursor (before, the cursor fell back
    // to the start and the endpoint was sent the tenant's whole history again).
    const gone = decodeCursor(cursors[3] ?? '');
    if (!gone) throw new Error('no cursor');
    // What the rebuild does: its event is parked (here resolved at once, so that the stream's
    // later changes are not parked behind it) and its change is not in the model.
    const goneEvent = (await h.store.readStream(employeeStreamId(tenant.tenantId, e.employeeId))).find(
      (event) => encodeCursor(event.position) === cursors[3],
    );
    if (!goneEvent) throw new Error('no event');
    await parkEvent(h.db.pool, changesProjection, goneEvent, { error: 'parked by a rebuild (test)', attempts: 1 });
    expect(await resolveParkedEvents(h.db.pool, changesProjection.name, [goneEvent.id])).toBe(1);
    await sqlAt(h.db.url, 'delete from employee_changes where tenant_id = $1 and commit_position = $2 and prepare_position = $3', [
      tenant.tenantId,
      gone.commit.toString(),
      gone.prepare.toString(),
    ]);
    const page = await readChanges(h.db.pool, tenant.tenantId, gone, 100);
    expect([page.known, page.changes]).toEqual([true, []]);
    // A client that stored that cursor as `next` reads on: nothing yet, then each later change once.
    const stored = await read(headers, `after=${cursors[3] ?? ''}`);
    expect([stored.data, stored.next]).toEqual([[], cursors[3]]);
    const endpoint = await insertEndpoint(h.db.pool, {
      id: randomUUID(),
      tenantId: tenant.tenantId,
      url: 'https://receiver.example/hooks',
      eventTypes: ['employee.hired', 'employee.details_changed'],
      secretSealed: 'sealed',
      cursor: gone,
    });
    expect(await dueEndpoints(h.db.pool, 10, endpoint.id)).toEqual([]);
    await e.rename('gone-4');
    const after = await waitFor(async () => {
      const next = await readChanges(h.db.pool, tenant.tenantId, gone, 100);
      return next.changes.length > 0 ? next : undefined;
    });
    expect(after.changes.map((c) => c.employee.firstName)).toEqual(['gone-4']);
    expect((await dueEndpoints(h.db.pool, 10, endpoint.id)).map((d) => d.id)).toEqual([endpoint.id]);
    const resumed = await read(headers, `after=${stored.next}`);
    expect(resumed.data.map((c) => c.employee.firstName)).toEqual(['gone-4']);
    expect((await read(headers, `after=${resumed.next}`)).data).toEqual([]);
    // A cursor of another tenant's change, or one no change ever had, is still refused (unknown cursor).
    const other = await h.tenant();
    expectProblem(
      await h.app.inject({ method: 'GET', url: `/v1/employees/changes?after=${cursors[0] ?? ''}`, headers: other.headers }),
      400,
    );
    expectProblem(
      await h.app.inject({
        method: 'GET',
        url: `/v1/employees/changes?after=${encodeCursor({ commit: gone.commit, prepare: gone.prepare + 1_000_000n })}`,
        headers,
      }),
      400,
    );
  });

  it('does not collide with /v1/employees/:id and needs employees:read', async () => {
    const a = await h.tenant();
    const page = await read(a.headers, '');
    expect(page.data).toEqual([]);
    const response = await h.app.inject({ method: 'GET', url: '/v1/employees/changes', headers: { 'x-tenant': a.tenant.slug } });
    expectProblem(response, 401);
  });
});

describe('when the projection is rebuilt (replay) or the projector restarts', () => {
  it('a stored cursor still resumes exactly after the last change seen, with no duplicates', async () => {
    const { tenant, headers } = await h.tenant();
    const e = await hire(h.store, tenant.tenantId, 'replay');
    for (let i = 1; i <= 5; i++) await e.rename(`replay-${i}`);
    const firstPage = await waitFor(async () => {
      const page = await read(headers, 'limit=3');
      return page.data.length === 3 ? page : undefined;
    });
    await h.projector.stop();
    await replayProjection(h.db.pool, h.store, changesProjection);
    const { runProjection } = await import('../../../shared/projections/follow.ts');
    h.projector = runProjection(h.db.pool, h.store, changesProjection, { pollIntervalMs: 100 });
    await e.rename('replay-6');
    const rest = await waitFor(async () => {
      const page = await read(headers, `limit=100&after=${firstPage.next}`);
      return page.data.length === 4 ? page : undefined;
    });
    expect([...firstPage.data, ...rest.data].map((c) => c.employee.firstName)).toEqual(Array.from({ length: 7 }, (_, n) => `replay-${n}`));
    expect(await readCheckpoint(h.db.pool, changesProjection.name)).not.toBeNull();
  });
});
