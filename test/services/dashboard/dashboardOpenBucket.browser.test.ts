import { randomUUID } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'puppeteer-core';
import { authHeaders, createTestUser, provisionTenant } from '../../support/auth.ts';
import { cardValue, chartsSettled, startDashboardHarness, type DashboardHarness } from '../../support/dashboardBrowser.ts';

/**
 * The open bucket on GET /dashboard, in headless chromium against a gateway whose requests feed
 * the KPI rollups (in-process bus and consumer, as `npm start` runs them). Only the API caller's
 * requests are recorded: the page's own reads would otherwise move p95 between the summary call
 * and the series calls of one reload, and the test compares them.
 */
let harness: DashboardHarness;
const caller = `api-caller-${randomUUID()}`;

beforeAll(async () => {
  harness = await startDashboardHarness({ usage: { record: (sample) => sample.userId === caller } });
}, 60_000);

afterAll(async () => {
  await harness?.close();
});

const USAGE = ['dau', 'mau', 'apiLatencyP95Ms', 'requests'] as const;

/** A chart's open point as the page drew it (`data-partial`), its legend and whether it says "No data". */
const chartOf = (page: Page, metric: string) =>
  page.$eval(`figure[data-metric="${metric}"]`, (figure) => ({
    partial: figure.hasAttribute('data-partial') ? Number(figure.getAttribute('data-partial')) : null,
    partialAt: figure.getAttribute('data-partial-at'),
    legend: figure.querySelector('.legend')?.textContent ?? null,
    caption: figure.querySelector('figcaption')?.textContent ?? '',
    empty: figure.querySelector('.empty') !== null,
  }));

describe('GET /dashboard: the bucket still open', () => {
  describe('when a fresh tenant makes its first API calls', () => {
    it('shows them in the current bucket of the usage charts within 15 s, as the summary does', async () => {
      const tenant = await provisionTenant(harness.db.pool);
      const analyst = await createTestUser(harness.db.pool, tenant, 'analyst');
      const page = await harness.browser.newPage();
      const failures: string[] = [];
      page.on('pageerror', (error) => failures.push(String(error)));
      page.on('console', (message) => message.type() === 'error' && failures.push(message.text()));
      await page.setViewport({ width: 1280, height: 1100 });
      await harness.signIn(page, tenant, analyst.email, analyst.password, '/dashboard?refresh=5');
      await chartsSettled(page, '7d', 30_000);
      // Nothing yet: the open bucket is there, empty, like the summary.
      expect(await cardValue(page, 'dau')).toEqual({ value: 0, text: '0' });
      expect((await chartOf(page, 'requests')).partial).toBe(0);

      const headers = await authHeaders(harness.auth, tenant, 'admin', caller);
      const calledAt = Date.now();
      for (let i = 0; i < 5; i++) {
        const response = await fetch(`${harness.base}/v1/analytics/kpi`, { headers });
        expect(response.status).toBe(200);
      }
      const shown = `(() => {
        const open = (metric) => document.querySelector('figure[data-metric="' + metric + '"]')?.getAttribute('data-partial');
        return open('requests') === '5' && open('dau') === '1'
          && document.querySelector('.value[data-metric="dau"]')?.getAttribute('data-value') === '1'
          && document.querySelector('#charts').getAttribute('aria-busy') === 'false';
      })()`;
      await page.waitForFunction(shown, { timeout: 15_000 });
      const elapsedMs = Date.now() - calledAt;
      console.info(`dashboard: first API calls shown in the open bucket after ${elapsedMs} ms`);

      for (const metric of ['dau', 'mau', 'apiLatencyP95Ms', 'mrr'] as const) {
        const [card, chart] = [await cardValue(page, metric), await chartOf(page, metric)];
        expect(chart.partial, `${metric}: the chart's last point equals the summary card`).toBe(card.value);
      }
      expect((await cardValue(page, 'apiLatencyP95Ms')).value).toBeGreaterThan(0);
      for (const metric of USAGE) {
        const chart = await chartOf(page, metric);
        expect(chart.empty, `${metric} says "No data" while the summary shows activity`).toBe(false);
        expect(Date.parse(chart.partialAt ?? '')).toBeGreaterThanOrEqual(calledAt);
        // Drawn apart from the closed hours: a dashed segment and marker, named by a legend and the caption.
        expect(chart.legend).toContain('this UTC hour so far (partial)');
        expect(chart.caption).toContain('(this UTC hour so far)');
      }
      // No billing yet: the summary says €0 and the revenue charts say so too.
      expect((await cardValue(page, 'mrr')).value).toBe(0);
      expect((await chartOf(page, 'mrr')).empty).toBe(true);

      await mkdir('reports', { recursive: true });
      await page.screenshot({ path: 'reports/dashboard-open-bucket.png', fullPage: true });
      expect(failures).toEqual([]);
      await page.close();
    }, 90_000);
  });
});
