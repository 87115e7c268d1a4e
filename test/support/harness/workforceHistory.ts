import { expect } from 'vitest';
import type { WorkforceHarness } from './workforce.ts';

/**
 * A hand-computed history (2025-12 … 2026-05, UTC), written through the API with back-dated
 * status changes, and recorded "now" = NOW. Versions in effective time:
 *
 *   A  eng    hired 2025-12-01  active [12-01, 02-15)  inactive from 02-15 (exit, back-dated)
 *   B  eng    hired 2026-01-10  active [01-10, 01-20)  on_leave [01-20, 02-10) (leave back-dated before
 *      the move)  → sales on 02-10 (recorded then): on_leave [02-10, 03-01)  active from 03-01
 *   C  sales  hired 2026-02-01  active [02-01, 03-31)  inactive [03-31, 04-10) (exit)  active from 04-10 (rehire)
 *   D  sales  hired 2026-03-15  active
 *   E  eng    hired 2026-05-01  (a future hire: absent until then)
 *   F  —      hired 2026-01-05  active [01-05, 01-31T23:00)  inactive after (exit), no department
 */
export const NOW = '2026-04-15T12:00:00.000Z';
export type Person = 'A' | 'B' | 'C' | 'D' | 'E' | 'F';

export async function writeHistory(h: WorkforceHarness, hr: Record<string, string>): Promise<Record<Person, string>> {
  let position = '';
  const send = async (method: 'POST' | 'PATCH', url: string, payload: Record<string, unknown>) => {
    const response = await h.app.inject({ method, url, headers: hr, payload });
    expect(response.statusCode, response.body).toBeLessThan(300);
    position = String(response.headers['x-log-position']);
    return response.json<{ id: string }>();
  };
  const hire = async (hiredAt: string, department?: string) =>
    (
      await send('POST', '/v1/employees', {
        email: `p-${hiredAt.slice(0, 10)}-${Math.random().toString(36).slice(2)}@example.test`,
        firstName: 'First',
        lastName: `Hired ${hiredAt.slice(0, 10)}`,
        ...(department && { department }),
        hiredAt,
      })
    ).id;
  const status = (id: string, to: string, effectiveAt: string) => send('POST', `/v1/employees/${id}/status`, { status: to, effectiveAt });

  h.setNow('2026-02-10T09:00:00.000Z');
  const A = await hire('2025-12-01T00:00:00.000Z', 'eng');
  const B = await hire('2026-01-10T00:00:00.000Z', 'eng');
  const F = await hire('2026-01-05T00:00:00.000Z');
  const C = await hire('2026-02-01T00:00:00.000Z', 'sales');
  // Recorded (and so effective) on 2026-02-10 09:00.
  await send('PATCH', `/v1/employees/${B}`, { department: 'sales', lastName: 'Moved' });
  h.setNow(NOW);
  const D = await hire('2026-03-15T00:00:00.000Z', 'sales');
  const E = await hire('2026-05-01T00:00:00.000Z', 'eng');
  await status(A, 'inactive', '2026-02-15T00:00:00.000Z');
  await status(B, 'on_leave', '2026-01-20T00:00:00.000Z');
  await status(B, 'active', '2026-03-01T00:00:00.000Z');
  await status(C, 'inactive', '2026-03-31T00:00:00.000Z');
  await status(C, 'active', '2026-04-10T00:00:00.000Z');
  await status(F, 'inactive', '2026-01-31T23:00:00.000Z');
  await h.settle(position);
  return { A, B, C, D, E, F };
}
