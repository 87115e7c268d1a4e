import { mkdir } from 'node:fs/promises';
import type { Page } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestUser } from '../../support/auth.ts';
import {
  chartsSettled,
  startDashboardHarness,
  workforceFigures,
  workforceSettled,
  type DashboardHarness,
} from '../../support/dashboardBrowser.ts';

/**
 * The dashboard's Workforce section in headless chromium against a real gateway and the workforce
 * projection (test/support/dashboardBrowser.ts): a fresh tenant's hires and exits, as the charts show them.
 */
let harness: DashboardHarness;

beforeAll(async () => {
  harness = await startDashboardHarness();
}, 60_000);

afterAll(async () => {
  await harness?.close();
});

const sum = (values: readonly number[] = []) => values.reduce((a, b) => a + b, 0);

/** uPlot charts not destroyed: each listens for `dppxchange` on the window until its destroy(). */
async function livePlots(page: Page): Promise<number> {
  const cdp = await page.createCDPSession();
  const { result } = await cdp.send('Runtime.evaluate', { expression: 'window' });
  const { listeners } = await cdp.send('DOMDebugger.getEventListeners', { objectId: result.objectId ?? '' });
  await cdp.detach();
  return listeners.filter((l) => l.type === 'dppxchange').length;
}

describe('when an analyst opens the Workforce section', () => {
  it('shows headcount by department, hires and exits, and turnover over the chosen range, the open bucket as partial', async () => {
    const now = Date.now();
    const tenant = await harness.workforceTenant(now);
    const analyst = await createTestUser(harness.db.pool, tenant, 'analyst');
    const page = await harness.browser.newPage();
    const failures: string[] = [];
    page.on('pageerror', (error) => failures.push(String(error)));
    page.on('console', (message) => message.type() === 'error' && failures.push(message.text()));
    await page.setViewport({ width: 1280, height: 1400 });
    await harness.signIn(page, tenant, analyst.email, analyst.password);
    await chartsSettled(page, '7d', 30_000);
    // Closed until opened: signing in asks nothing of the workforce API.
    expect(await page.$$('figure[data-workforce]')).toHaveLength(0);
    const plotsBefore = await livePlots(page);

    await page.click('input[name="range"][value="30d"]');
    await page.click('#workforce > summary');
    await workforceSettled(page, '30d', 30_000);
    const month = await workforceFigures(page);
    // Hired 60 (sales), 20 (sales), 10 (eng, left 3 days ago), 8 (no department) and 5 (eng) days ago.
    const headcount = month.headcount!;
    expect(headcount).toMatchObject({ range: '30d', partial: 'true', error: null, canvas: true });
    expect(headcount.points).toBeGreaterThanOrEqual(30);
    expect(headcount.series.map((s) => s.label)).toEqual(['All', 'sales', 'eng']);
    expect(headcount.legend).toEqual(['All', 'sales', 'eng']);
    const [all, sales, eng] = headcount.series;
    expect([all?.values[0], all?.values.at(-1)]).toEqual([1, 4]);
    expect([sales?.values[0], sales?.values.at(-1)]).toEqual([1, 2]);
    expect([Math.max(...(eng?.values ?? [])), eng?.values.at(-1)]).toEqual([2, 1]);
    expect(headcount.caption).toBe('Now: 4 employees (sales 2, eng 1)');

    const movements = month.movements!;
    expect(movements).toMatchObject({ range: '30d', partial: 'true', error: null, points: headcount.points });
    expect(movements.series.map((s) => [s.label, sum(s.values)])).toEqual([
      ['Hires', 4],
      ['Exits', 1],
    ]);
    expect(movements.caption).toBe('In this range: 4 hires, 1 exit');

    // The exit's day: 1 exit ÷ the average of 5 employed at its start and 4 at its end.
    const turnover = month.turnover!;
    expect(turnover).toMatchObject({ range: '30d', partial: 'true', error: null });
    const rates = turnover.series[0]?.values ?? [];
    expect(rates.filter((r) => r !== 0)).toHaveLength(1);
    expect(Math.max(...rates)).toBeCloseTo(1 / 4.5, 6); // the API gives 6 decimals
    expect(await page.$eval('#workforce-status', (el) => el.textContent)).toBe(
      'Daily points; a dashed last stretch is a bucket still open.',
    );

    // The same range picker drives it: 12 months, monthly points, the hire of 60 days ago now inside.
    await page.click('input[name="range"][value="365d"]');
    await workforceSettled(page, '365d', 30_000);
    const year = await workforceFigures(page);
    expect(year.headcount?.points).toBeGreaterThanOrEqual(12);
    expect(year.headcount?.points).toBeLessThanOrEqual(13);
    expect(year.headcount?.series[0]?.values.at(-1)).toBe(4);
    expect(year.movements?.series.map((s) => sum(s.values))).toEqual([5, 1]);
    expect(year.movements?.caption).toBe('In this range: 5 hires, 1 exit');
    await chartsSettled(page, '365d', 30_000);
    await mkdir('reports', { recursive: true });
    await (await page.$('#workforce'))?.screenshot({ path: 'reports/dashboard-workforce.png' });

    // Signing out closes the section and forgets its charts: the next sign-in may be another tenant.
    await page.click('#signout');
    await page.waitForSelector('#signin:not([hidden])');
    expect(await page.$eval('#workforce', (el) => el.hasAttribute('open'))).toBe(false);
    expect(await page.$$('figure[data-workforce]')).toHaveLength(0);
    // And its charts are destroyed, not only taken off the page.
    expect(await livePlots(page)).toBeLessThanOrEqual(plotsBefore);
    expect(failures).toEqual([]);
    await page.close();
  }, 90_000);
});
