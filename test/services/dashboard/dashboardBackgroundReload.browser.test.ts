import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestUser } from '../../support/auth.ts';
import { cardValue, chartsSettled, figures, startDashboardHarness, type DashboardHarness } from '../../support/dashboardBrowser.ts';
import { staysTrue } from '../../support/staysTrue.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * The KPI page reloading itself (`?refresh=5`, so a reload is due 5 s after the last one
 * settled): it spends the tenant's shared rate limit only while the bucket has half its burst to
 * spare, and a reload that fails leaves the page as it was, status line included.
 */
let harness: DashboardHarness;

beforeAll(async () => {
  harness = await startDashboardHarness();
}, 60_000);

afterAll(async () => {
  await harness?.close();
});

const seriesPath = (url: string) => new URL(url).pathname === '/v1/analytics/kpi/series';

describe('GET /dashboard reloading in the background', () => {
  describe('when the series calls of a background reload are refused (503, 429)', () => {
    it('keeps every chart drawn before, leaves the status line alone and retries nothing', async () => {
      const tenant = await harness.seededTenant(Date.now());
      const analyst = await createTestUser(harness.db.pool, tenant, 'analyst');
      const { page, pageErrors, statusTexts } = await harness.recordingPage();
      await harness.signIn(page, tenant, analyst.email, analyst.password, '/dashboard?refresh=5');
      await chartsSettled(page, '7d', 30_000);
      const status = await page.$eval('#status', (el) => el.textContent);
      expect(status).toBe('Showing the last 7 days (hourly points).');
      const drawn = await figures(page);
      expect(drawn.every((f) => f.points !== null && f.error === null)).toBe(true);
      const statusChanges = (await statusTexts()).length;

      // From now on the gateway "refuses" every series call; each would be retried after 1 s if it were a user's.
      const refused: Array<{ metric: string | null; at: number }> = [];
      await page.setRequestInterception(true);
      page.on('request', (request) => {
        if (!seriesPath(request.url())) return void request.continue();
        const status = refused.length % 2 === 0 ? 503 : 429;
        refused.push({ metric: new URL(request.url()).searchParams.get('metric'), at: Date.now() });
        return void request.respond({
          status,
          headers: { 'retry-after': '1' },
          contentType: 'application/problem+json',
          body: JSON.stringify({ status, title: 'Try again later' }),
        });
      });
      await page.waitForFunction(
        `document.querySelector('#charts').getAttribute('aria-busy') === 'true'`, // the background reload started
        { timeout: 15_000, polling: 20 },
      );
      await chartsSettled(page, '7d', 15_000);
      await sleep(2_000); // past the Retry-After of 1 s: a retry would have gone out by now
      // Every series was asked once per background reload, and none again within the reload period:
      // a retry would follow its refusal after the 1-s Retry-After, while the next reload (every 5 s)
      // may come in on a slow machine before the checks below.
      expect([...new Set(refused.map((r) => r.metric))].sort()).toEqual([
        'apiLatencyP95Ms',
        'arr',
        'churnRate',
        'dau',
        'mau',
        'mrr',
        'requests',
      ]);
      for (const [i, r] of refused.entries()) {
        const before = refused.slice(0, i).findLast((p) => p.metric === r.metric);
        if (before) expect(r.at - before.at).toBeGreaterThan(4_000);
      }

      expect(await figures(page)).toEqual(drawn);
      expect(await page.$eval('#status', (el) => el.textContent)).toBe(status);
      expect((await statusTexts()).slice(statusChanges)).toEqual([]); // not even "Loading charts…" in between
      expect(await cardValue(page, 'mrr')).toEqual({ value: 200, text: '€200.00' });
      expect(pageErrors).toEqual([]);
      await page.close();
    }, 90_000);
  });

  describe('when the tenant has less than half its burst left (override: burst 24, 1 a minute)', () => {
    it('puts background reloads off instead of spending the last tokens', async () => {
      // Seeding takes 2 tokens: 22 left. The first load takes 8 (14 left, at least 12: a reload
      // may go), the first reload 8 more (6 left): the next ones wait for the bucket to refill.
      const tenant = await harness.seededTenant(Date.now(), { plan: 'starter', rateLimitOverride: { perMinute: 1, burst: 24 } });
      const analyst = await createTestUser(harness.db.pool, tenant, 'analyst');
      const { page, requests, answers, pageErrors } = await harness.recordingPage();
      await harness.signIn(page, tenant, analyst.email, analyst.password, '/dashboard?refresh=5');
      await chartsSettled(page, '7d', 30_000);
      // The first background reload: 8 more calls, all answered.
      await waitFor(() => requests.length >= 16 && answers.length >= 16, 20_000, 'the first background reload');
      await chartsSettled(page, '7d', 15_000);
      // Three reload periods: every one of them finds 6 of 24 tokens and waits.
      expect(await staysTrue(() => requests.length === 16, 15_000)).toBe(true);
      expect(answers.every((a) => a.status === 200)).toBe(true);
      expect((await figures(page)).every((f) => f.points !== null && f.error === null)).toBe(true);
      expect(pageErrors).toEqual([]);
      await page.close();
    }, 90_000);
  });
});
