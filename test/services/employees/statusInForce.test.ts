import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from '../../support/harness/employeesApi.ts';
import { createWorkforceHarness, ok, type WorkforceHarness } from '../../support/harness/workforce.ts';

/**
 * Status changes back-dated before the status in force, and changes without a date: the status in
 * force at an instant is the one with the latest effective instant at or before it (ties: the later
 * recorded), and the current status is the one in force now, in every read.
 */
const NOW = '2026-04-15T12:00:00.000Z';

let h: WorkforceHarness;
let hr: Record<string, string>;
let analyst: Record<string, string>;
let position = '';

beforeAll(async () => {
  h = await createWorkforceHarness();
  ({ hr, analyst } = await h.tenant());
  h.setNow(NOW);
}, 60_000);
afterAll(async () => {
  await h?.close();
});

async function send(url: string, payload: Record<string, unknown>) {
  const response = await h.app.inject({ method: 'POST', url, headers: hr, payload });
  position = String(response.headers['x-log-position']);
  return response;
}

const hire = async (hiredAt: string, department: string) =>
  ok<{ id: string }>(
    await send('/v1/employees', {
      email: `${department}-${Math.random().toString(36).slice(2)}@example.test`,
      firstName: 'First',
      lastName: 'Last',
      department,
      hiredAt,
    }),
  ).id;

const status = (id: string, to: string, effectiveAt?: string) =>
  send(`/v1/employees/${id}/status`, { status: to, ...(effectiveAt !== undefined && { effectiveAt }) });

const get = async <T>(url: string, headers = hr) => ok<T>(await h.app.inject({ method: 'GET', url, headers }));

/** The statuses an employee shows: as of `at`, and in the current list (after the last write). */
async function statusAsOf(id: string, department: string, at: string) {
  await h.settle(position);
  const page = await get<Page>(`/v1/employees?asOf=${encodeURIComponent(at)}&department=${department}`);
  return page.data.find((e) => e.id === id)?.status;
}

async function currentStatus(id: string, department: string) {
  const page = await get<Page>(`/v1/employees?department=${department}&minPosition=${encodeURIComponent(position)}`);
  return page.data.find((e) => e.id === id)?.status;
}

async function monthly(metric: string, department: string) {
  await h.settle(position);
  const body = await get<{ points: { at: string; value: number }[] }>(
    `/v1/analytics/workforce/series?metric=${metric}&interval=month&from=2026-01-01T00:00:00Z&to=2026-03-01T00:00:00Z&department=${department}`,
    analyst,
  );
  return body.points.map((p) => p.value);
}

describe('a status change back-dated before the status in force', () => {
  it('rewrites the past only: the later effective status stays current everywhere', async () => {
    const id = await hire('2026-01-01T00:00:00.000Z', 'backdated');
    ok(await status(id, 'on_leave', '2026-03-01T00:00:00.000Z'));
    const left = ok<{ status: string }>(await status(id, 'inactive', '2026-02-15T00:00:00.000Z'));
    expect(left.status).toBe('on_leave');
    expect(await statusAsOf(id, 'backdated', '2026-02-20T00:00:00Z')).toBe('inactive');
    expect(await statusAsOf(id, 'backdated', '2026-03-02T00:00:00Z')).toBe('on_leave');
    expect(await statusAsOf(id, 'backdated', NOW)).toBe('on_leave');
    expect(await currentStatus(id, 'backdated')).toBe('on_leave');
    expect((await get<{ status: string }>(`/v1/employees/${id}`)).status).toBe('on_leave');
    const onLeave = await get<Page>(`/v1/employees?status=on_leave&department=backdated&minPosition=${encodeURIComponent(position)}`);
    expect(onLeave.meta.total).toBe(1);
  });

  it('moves an exit earlier, counting one exit, on the earlier date', async () => {
    const id = await hire('2026-01-01T00:00:00.000Z', 'moved');
    ok(await status(id, 'inactive', '2026-02-15T00:00:00.000Z'));
    ok(await status(id, 'inactive', '2026-02-10T00:00:00.000Z'));
    expect(await statusAsOf(id, 'moved', '2026-02-12T00:00:00Z')).toBe('inactive');
    expect(await currentStatus(id, 'moved')).toBe('inactive');
    // Buckets January, February, March.
    expect(await monthly('exits', 'moved')).toEqual([0, 1, 0]);
    expect(await monthly('headcount', 'moved')).toEqual([1, 0, 0]);
  });

  it('counts an exit at the very hire instant as a hire and an exit, never in the headcount', async () => {
    const id = await hire('2026-01-01T00:00:00.000Z', 'instant');
    ok(await status(id, 'inactive', '2026-01-01T00:00:00.000Z'));
    expect(await monthly('hires', 'instant')).toEqual([1, 0, 0]);
    expect(await monthly('exits', 'instant')).toEqual([1, 0, 0]);
    expect(await monthly('headcount', 'instant')).toEqual([0, 0, 0]);
  });
});

describe('a status change without effectiveAt', () => {
  it('is accepted for a future hire, and takes effect from the hire', async () => {
    const id = await hire('2026-05-01T00:00:00.000Z', 'future');
    const changed = ok<{ status: string }>(await status(id, 'on_leave'));
    expect(changed.status).toBe('on_leave');
    expect(await statusAsOf(id, 'future', '2026-05-02T00:00:00Z')).toBe('on_leave');
    expect(await currentStatus(id, 'future')).toBe('on_leave');
  });
});
