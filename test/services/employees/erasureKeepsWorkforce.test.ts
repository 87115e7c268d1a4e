import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../../shared/db/pool.ts';
import { authHeaders } from '../../support/auth.ts';
import type { Page } from '../../support/harness/employeesApi.ts';
import { createWorkforceHarness, ok, type WorkforceHarness } from '../../support/harness/workforce.ts';
import { NOW, writeHistory, type Person } from '../../support/harness/workforceHistory.ts';

/**
 * An erasure takes the person out of the directory at every instant, and out of its totals, while
 * the workforce figures (headcount, hires, exits) go on counting them: what is left of them (dates,
 * department, status) is not personal.
 */
let h: WorkforceHarness;
let hr: Record<string, string>;
let analyst: Record<string, string>;
let admin: Record<string, string>;
let ids: Record<Person, string>;

beforeAll(async () => {
  h = await createWorkforceHarness();
  const mine = await h.tenant();
  ({ hr, analyst } = mine);
  admin = await authHeaders(h.auth, mine.tenant, 'admin');
  ids = await writeHistory(h, hr);
}, 60_000);
afterAll(async () => {
  await h?.close();
});

const months = 'interval=month&from=2026-01-01T00:00:00Z&to=2026-12-31T00:00:00Z';
const INSTANTS = ['2026-01-15T00:00:00Z', '2026-02-20T00:00:00Z', '2026-03-15T00:00:00Z', NOW];

async function figures() {
  const out: Record<string, unknown> = {};
  for (const metric of ['headcount', 'hires', 'exits', 'turnoverRate'])
    out[metric] = ok(
      await h.app.inject({ method: 'GET', url: `/v1/analytics/workforce/series?metric=${metric}&${months}`, headers: analyst }),
    );
  for (const at of INSTANTS)
    out[at] = ok(await h.app.inject({ method: 'GET', url: `/v1/analytics/workforce?at=${encodeURIComponent(at)}`, headers: analyst }));
  return out;
}

const asOf = async (at: string) =>
  ok<Page>(await h.app.inject({ method: 'GET', url: `/v1/employees?asOf=${encodeURIComponent(at)}`, headers: hr }));

describe('an erasure and the directory in effective time', () => {
  it('leaves the workforce figures as they were, takes the person out of every as-of list and its total', async () => {
    const person = ids.B; // employed from January on, through a leave: in force at every instant below
    const before = await figures();
    const listsBefore = await Promise.all(INSTANTS.map(asOf));
    for (const page of listsBefore) expect(page.data.map((e) => e.id)).toContain(person);

    const erased = await h.app.inject({ method: 'POST', url: `/v1/employees/${person}/erasure`, headers: admin });
    expect(erased.statusCode, erased.body).toBe(200);
    await h.settle(String(erased.headers['x-log-position']));

    expect(await figures()).toEqual(before);
    const listsAfter = await Promise.all(INSTANTS.map(asOf));
    listsAfter.forEach((page, i) => {
      expect(page.data.map((e) => e.id)).not.toContain(person);
      expect(page.meta.total).toBe(listsBefore[i]!.meta.total - 1);
      expect(page.data).toHaveLength(listsBefore[i]!.data.length - 1);
    });

    // Page by page the list has no hole where they were: every page of one holds one employee.
    for (const [i, at] of INSTANTS.entries()) {
      for (let page = 1; page <= listsAfter[i]!.meta.total; page++) {
        const one = ok<Page>(
          await h.app.inject({ method: 'GET', url: `/v1/employees?asOf=${encodeURIComponent(at)}&limit=1&page=${page}`, headers: hr }),
        );
        expect(one.data.map((e) => e.id)).toEqual([listsAfter[i]!.data[page - 1]!.id]);
      }
    }

    // Every version of theirs keeps its dates, department and status, and loses names and email.
    const versions = await h.db.pool.any(
      sql.type(
        z.object({
          first_name: z.string().nullable(),
          last_name: z.string().nullable(),
          email: z.string().nullable(),
          erased: z.boolean(),
        }),
      )`
        select first_name, last_name, email, erased from employee_versions where employee_id = ${person}`,
    );
    expect(versions.length).toBeGreaterThan(1);
    expect(versions.every((v) => v.first_name === null && v.last_name === null && v.email === null && v.erased)).toBe(true);
  });
});
