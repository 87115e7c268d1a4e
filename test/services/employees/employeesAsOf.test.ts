import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem } from '../../support/harness/employees.ts';
import type { Page } from '../../support/harness/employeesApi.ts';
import { createWorkforceHarness, ok, type WorkforceHarness } from '../../support/harness/workforce.ts';
import { NOW, writeHistory, type Person } from '../../support/harness/workforceHistory.ts';

let h: WorkforceHarness;
let hr: Record<string, string>;
let ids: Record<Person, string>;
let letterOf: Map<string, Person>;

beforeAll(async () => {
  h = await createWorkforceHarness();
  ({ hr } = await h.tenant());
  ids = await writeHistory(h, hr);
  letterOf = new Map(Object.entries(ids).map(([letter, id]) => [id, letter as Person]));
  // Another tenant's staff, hired long ago, must never show.
  const other = await h.tenant();
  await writeHistory(h, other.hr);
}, 60_000);
afterAll(async () => {
  await h?.close();
});

/** The as-of list as `letter department status lastName` rows, and its total. */
async function asOf(at: string, filter = '') {
  const page = ok<Page>(await h.app.inject({ method: 'GET', url: `/v1/employees?asOf=${encodeURIComponent(at)}${filter}`, headers: hr }));
  return {
    rows: page.data.map((e) => `${letterOf.get(e.id) ?? e.id} ${e.department ?? '-'} ${e.status} ${e.lastName}`),
    total: page.meta.total,
  };
}

const A = 'A eng active Hired 2025-12-01';
const Aexit = 'A eng inactive Hired 2025-12-01';
const F = 'F - active Hired 2026-01-05';
const Fexit = 'F - inactive Hired 2026-01-05';

describe('GET /v1/employees?asOf= on a back-dated history', () => {
  it('lists nobody before the first hire', async () => {
    expect(await asOf('2025-11-30T00:00:00Z')).toEqual({ rows: [], total: 0 });
  });

  it('shows the department, names and status in force then, hiredAt desc', async () => {
    expect(await asOf('2026-01-15T00:00:00Z')).toEqual({ rows: ['B eng active Hired 2026-01-10', F, A], total: 3 });
    // B's leave, recorded in April, was back-dated before the move to sales (recorded on 02-10).
    expect(await asOf('2026-02-01T00:00:00Z')).toEqual({
      rows: ['C sales active Hired 2026-02-01', 'B eng on_leave Hired 2026-01-10', Fexit, A],
      total: 4,
    });
    expect(await asOf('2026-02-12T00:00:00Z')).toEqual({
      rows: ['C sales active Hired 2026-02-01', 'B sales on_leave Moved', Fexit, A],
      total: 4,
    });
    expect(await asOf('2026-04-01T00:00:00Z')).toEqual({
      rows: ['D sales active Hired 2026-03-15', 'C sales inactive Hired 2026-02-01', 'B sales active Moved', Fexit, Aexit],
      total: 5,
    });
  });

  it('answers today without the future hire, as the current list has it', async () => {
    const today = await asOf(NOW);
    expect(today).toEqual({
      rows: ['D sales active Hired 2026-03-15', 'C sales active Hired 2026-02-01', 'B sales active Moved', Fexit, Aexit],
      total: 5,
    });
    expect((await asOf('2026-05-01T00:00:00Z')).rows[0]).toBe('E eng active Hired 2026-05-01');
  });

  it('holds a change from its effective instant on, inclusive', async () => {
    expect((await asOf('2026-02-14T23:59:59.999Z')).rows.at(-1)).toBe(A);
    expect((await asOf('2026-02-15T00:00:00Z')).rows.at(-1)).toBe(Aexit);
  });

  it('counts within the day of asOf exactly (a change at 23:00)', async () => {
    expect(await asOf('2026-01-31T22:59:59.999Z', '&status=active')).toEqual({ rows: [F, A], total: 2 });
    expect(await asOf('2026-01-31T23:30:00Z', '&status=active')).toEqual({ rows: [A], total: 1 });
    expect(await asOf('2026-01-31T23:30:00Z', '&status=inactive')).toEqual({ rows: [Fexit], total: 1 });
  });

  it('applies every other filter by the values in force then, with pagination and exact totals', async () => {
    expect(await asOf('2026-02-12T00:00:00Z', '&department=eng')).toEqual({ rows: [A], total: 1 });
    expect(await asOf('2026-02-12T00:00:00Z', '&department=sales')).toEqual({
      rows: ['C sales active Hired 2026-02-01', 'B sales on_leave Moved'],
      total: 2,
    });
    expect(await asOf('2026-02-12T00:00:00Z', '&status=on_leave')).toEqual({ rows: ['B sales on_leave Moved'], total: 1 });
    expect(await asOf('2026-04-01T00:00:00Z', '&status=inactive')).toEqual({
      rows: ['C sales inactive Hired 2026-02-01', Fexit, Aexit],
      total: 3,
    });
    expect(await asOf('2026-04-01T00:00:00Z', '&limit=2&page=2')).toEqual({ rows: ['B sales active Moved', Fexit], total: 5 });
    expect(await asOf('2026-04-01T00:00:00Z', '&limit=2&page=4')).toEqual({ rows: [], total: 5 });
    expect(await asOf('2026-04-01T00:00:00Z', '&hiredFrom=2026-01-01&hiredTo=2026-02-01')).toEqual({
      rows: ['C sales inactive Hired 2026-02-01', 'B sales active Moved', Fexit],
      total: 3,
    });
    expect(await asOf('2026-01-15T00:00:00Z', '&department=eng&status=active')).toEqual({
      rows: ['B eng active Hired 2026-01-10', A],
      total: 2,
    });
  });

  it('refuses an asOf that is not an instant', async () => {
    expectProblem(await h.app.inject({ method: 'GET', url: '/v1/employees?asOf=yesterday', headers: hr }), 400);
  });
});

describe('POST /v1/employees/{id}/status with effectiveAt', () => {
  it('refuses a date in the future or before the hire with a 400 naming effectiveAt', async () => {
    const change = (effectiveAt: string) =>
      h.app.inject({ method: 'POST', url: `/v1/employees/${ids.D}/status`, headers: hr, payload: { status: 'on_leave', effectiveAt } });
    const future = expectProblem(await change('2026-04-15T12:00:01Z'), 400);
    expect(future.errors).toEqual([{ path: 'body.effectiveAt', message: 'must not be in the future' }]);
    const early = expectProblem(await change('2026-03-14T23:59:59Z'), 400);
    expect(JSON.stringify(early.errors)).toMatch(/before the hire date/);
    expectProblem(await change('not a date'), 400);
  });
});
