import { mkdir } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'puppeteer-core';
import { createTestUser, provisionTenant } from '../../support/auth.ts';
import { byCall, cardValue, chartsSettled, figures, startDashboardHarness, type DashboardHarness } from '../../support/dashboardBrowser.ts';
import { staysTrue } from '../../support/staysTrue.ts';

/** GET /dashboard in headless chromium against a real gateway (test/support/dashboardBrowser.ts). */
let harness: DashboardHarness;

/** The stored access token "expires": the reload's first API call gets 401, so the page must refresh to show the cards. */
async function reloadWithExpiredAccessToken(page: Page): Promise<void> {
  await page.evaluate(`(() => {
    const s = JSON.parse(sessionStorage.getItem('kpi-session'));
    sessionStorage.setItem('kpi-session', JSON.stringify({ ...s, accessToken: 'expired.token.value' }));
  })()`);
  await page.reload();
  await page.waitForFunction(`document.querySelector('.value[data-metric="mrr"]')?.getAttribute('data-value') === '200'`, {
    timeout: 20_000,
  });
}

beforeAll(async () => {
  harness = await startDashboardHarness();
}, 60_000);

afterAll(async () => {
  await harness?.close();
});

describe('GET /dashboard in headless chromium', () => {
  describe('when an analyst signs in', () => {
    it('shows the cards with the seeded numbers, and the charts change with the range', async () => {
      const now = Date.now();
      const tenant = await harness.seededTenant(now);
      const analyst = await createTestUser(harness.db.pool, tenant, 'analyst');
      const page = await harness.browser.newPage();
      const failures: string[] = [];
      page.on('pageerror', (error) => failures.push(String(error)));
      page.on('requestfailed', (request) => failures.push(`${request.url()} ${request.failure()?.errorText}`));
      page.on('console', (message) => message.type() === 'error' && failures.push(message.text()));
      await page.setViewport({ width: 1280, height: 1100 });
      await harness.signIn(page, tenant, analyst.email, analyst.password);
      await page.waitForFunction("document.querySelectorAll('figure[data-points]').length === 7", { timeout: 20_000 });

      // MRR = 100 + 1200 / 12 = 200 (c3 cancelled); ARR = 2,400; churn = 1 churned ÷ (0 active 30 days ago + 3 new) = 1/3.
      expect(await cardValue(page, 'mrr')).toEqual({ value: 200, text: '€200.00' });
      expect(await cardValue(page, 'arr')).toEqual({ value: 2400, text: '€2,400.00' });
      const churn = await cardValue(page, 'churnRate');
      expect(churn.value).toBeCloseTo(1 / 3, 10);
      expect(churn.text).toBe('33.3 %');
      expect(await cardValue(page, 'dau')).toEqual({ value: 4, text: '4' });
      expect(await cardValue(page, 'mau')).toEqual({ value: 6, text: '6' });
      // p95 of 1 … 100 ms: rank ⌊0.95 · 99⌋ → 95 ms, within the sketch's 1 %.
      const p95 = await cardValue(page, 'apiLatencyP95Ms');
      expect(Math.abs(p95.value - 95) / 95).toBeLessThanOrEqual(0.01);
      expect(p95.text).toMatch(/^9[45](\.\d)? ms$/);

      // 7 days, hourly points → 30 days, daily points: every chart redraws with other data.
      const chart = () =>
        page.$eval('figure[data-metric="requests"]', (figure) => ({
          points: Number(figure.getAttribute('data-points')),
          caption: figure.querySelector('figcaption')?.textContent ?? '',
          pixels: figure.querySelector('canvas')?.toDataURL() ?? '',
        }));
      const week = await chart();
      expect(week.points).toBeGreaterThanOrEqual(168);
      expect(week.caption).toMatch(/^\d+ points · latest/);
      await page.focus('input[name="range"][value="30d"]');
      await page.keyboard.press('Space');
      await page.waitForFunction("document.querySelector('#charts')?.getAttribute('data-range') === '30d'", { timeout: 20_000 });
      const month = await chart();
      expect(month.points).toBeGreaterThanOrEqual(30);
      expect(month.points).toBeLessThanOrEqual(31);
      expect(month.pixels).not.toBe(week.pixels);
      expect(month.caption).not.toBe(week.caption);

      await mkdir('reports', { recursive: true });
      await page.screenshot({ path: 'reports/dashboard.png', fullPage: true });
      expect(failures).toEqual([]);
      await page.close();
    }, 60_000);

    it('refreshes an expired access token and carries on', async () => {
      const tenant = await harness.seededTenant(Date.now());
      const analyst = await createTestUser(harness.db.pool, tenant, 'analyst');
      const page = await harness.browser.newPage();
      await harness.signIn(page, tenant, analyst.email, analyst.password);
      await page.waitForFunction("document.querySelectorAll('figure[data-points]').length === 7", { timeout: 20_000 });
      await reloadWithExpiredAccessToken(page);
      const stored = JSON.parse(String(await page.evaluate(`sessionStorage.getItem('kpi-session')`))) as Record<string, string>;
      expect(stored.accessToken).not.toBe('expired.token.value');
      expect(await page.$eval('#signin', (el) => el.hasAttribute('hidden'))).toBe(true);
      await page.close();
    }, 60_000);
  });

  describe('when the refresh meets a draining gateway, a 429 or a dropped connection', () => {
    it('retries the refresh and stays signed in; only a 401 from it signs out', async () => {
      const tenant = await harness.seededTenant(Date.now());
      const analyst = await createTestUser(harness.db.pool, tenant, 'analyst');
      const page = await harness.browser.newPage();
      await harness.signIn(page, tenant, analyst.email, analyst.password);
      await page.waitForFunction("document.querySelectorAll('figure[data-points]').length === 7", { timeout: 20_000 });

      // The refreshes the browser sends meet these first (then the real gateway answers).
      const transient = ['drop', 503, 429];
      const refreshes: Array<{ at: number; answer: string | number }> = [];
      await page.setRequestInterception(true);
      page.on('request', (request) => {
        if (new URL(request.url()).pathname !== '/v1/auth/refresh') return void request.continue();
        const answer = transient.shift() ?? 'gateway';
        refreshes.push({ at: Date.now(), answer });
        if (answer === 'drop') return void request.abort('connectionreset');
        if (typeof answer === 'number') {
          return void request.respond({
            status: answer,
            headers: { 'retry-after': '1' },
            contentType: 'application/problem+json',
            body: JSON.stringify({ status: answer, title: 'Try again later' }),
          });
        }
        return void request.continue();
      });
      await reloadWithExpiredAccessToken(page);
      expect(refreshes.map((r) => r.answer)).toEqual(['drop', 503, 429, 'gateway']);
      expect((refreshes[2]?.at ?? 0) - (refreshes[1]?.at ?? 0)).toBeGreaterThanOrEqual(900); // Retry-After: 1
      expect(await page.$eval('#signin', (el) => el.hasAttribute('hidden'))).toBe(true);

      // A refresh token the gateway no longer accepts: a 401, and the sign-in form.
      await page.evaluate(`(() => {
        const s = JSON.parse(sessionStorage.getItem('kpi-session'));
        sessionStorage.setItem('kpi-session', JSON.stringify({ ...s, accessToken: 'expired.token.value', refreshToken: 'revoked' }));
      })()`);
      await page.reload();
      await page.waitForFunction("!document.querySelector('#signin').hasAttribute('hidden')", { timeout: 20_000 });
      expect(await page.evaluate(`sessionStorage.getItem('kpi-session')`)).toBeNull();
      await page.close();
    }, 60_000);
  });

  describe('when a user without analytics:read signs in (role employee)', () => {
    it('shows a clear message instead of a broken page', async () => {
      const tenant = await provisionTenant(harness.db.pool);
      const employee = await createTestUser(harness.db.pool, tenant, 'employee');
      const page = await harness.browser.newPage();
      await harness.signIn(page, tenant, employee.email, employee.password);
      await page.waitForSelector('#forbidden:not([hidden])', { timeout: 20_000 });
      const text = await page.$eval('#forbidden', (el) => el.textContent ?? '');
      expect(text).toContain('No access to analytics');
      expect(text).toContain('analytics:read');
      expect(await page.$eval('#dashboard', (el) => el.hasAttribute('hidden'))).toBe(true);
      await page.close();
    }, 60_000);
  });

  describe('when a Starter tenant (burst 10, 1 token a second, shared by all its users) runs out of tokens', () => {
    it('switches the range several times quickly: refused calls wait for Retry-After, and every chart ends up drawn for the last range', async () => {
      const { page, answers, pageErrors, statusTexts } = await harness.starterSignedInWithEmptyBucket();

      for (const range of ['30d', '365d', '24h', '30d', '90d']) {
        await page.click(`input[name="range"][value="${range}"]`);
        await sleep(150); // the user's pace between clicks: several ranges while the first one's calls still wait
      }
      await chartsSettled(page, '90d', 45_000);

      // The first range's calls met the empty bucket: refused with Retry-After, the page said so.
      const refused = answers.filter((a) => a.status === 429);
      expect(refused.length).toBeGreaterThanOrEqual(1);
      expect(refused.every((a) => a.retryAfter === '1')).toBe(true);
      expect((await statusTexts()).some((text) => /^Rate limited — retrying in \d+ s$/.test(text))).toBe(true);
      // No call is refused more than the page's 4 retries (+ the first try).
      const refusalsPerCall = byCall(refused);
      expect(Math.max(...[...refusalsPerCall.values()].map((r) => r.length))).toBeLessThanOrEqual(5);

      // Every chart shows the last range (90 daily points), none an error; an answer of an older
      // range, even one arriving late, replaces nothing.
      const settled = async () => {
        const all = await figures(page);
        expect(all).toHaveLength(7);
        for (const figure of all) {
          expect(figure).toMatchObject({ range: '90d', error: null, busy: null });
          expect(figure.points).toBeGreaterThanOrEqual(90);
          expect(figure.points).toBeLessThanOrEqual(91);
        }
      };
      await settled();
      expect(await page.$eval('#status', (el) => el.textContent)).toBe('Showing the last 90 days (daily points).');
      // Nothing that arrives late (an older range's retry) redraws a chart.
      const onlyLastRange = async () =>
        (await figures(page)).every(
          (f) => f.range === '90d' && f.error === null && f.busy === null && f.points !== null && f.points >= 90 && f.points <= 91,
        );
      expect(await staysTrue(onlyLastRange, 1_500)).toBe(true);
      await settled();
      expect(await page.$eval('#charts', (el) => el.getAttribute('data-range'))).toBe('90d');
      expect(pageErrors).toEqual([]);
      await page.close();
    }, 90_000);

    it('retries each refused call after its Retry-After and draws every chart from the retries', async () => {
      const { page, requests, answers, pageErrors } = await harness.starterSignedInWithEmptyBucket();
      await page.click('input[name="range"][value="30d"]');
      await chartsSettled(page, '30d', 45_000);

      // The 7 calls of the 30-day range left at once into an empty bucket (refilling 1 a second).
      const monthly = (url: string) => new URL(url).searchParams.get('interval') === 'day';
      const calls = byCall(answers.filter((a) => monthly(a.url)));
      expect(calls.size).toBe(7);
      const retried = [...calls.entries()].filter(([, answered]) => answered[0]?.status === 429);
      expect(retried.length).toBeGreaterThanOrEqual(1);
      for (const [url, answered] of retried) {
        expect(answered.at(-1)?.status).toBe(200);
        // Each retry waited Retry-After (1 s) after the refusal before it (250 ms for event delivery to this process).
        for (const [i, refusal] of answered.entries()) {
          if (refusal.status !== 429) continue;
          const next = requests.filter((r) => r.url === url && r.at > refusal.at)[0];
          expect(answered[i + 1]).toBeDefined();
          expect(next).toBeDefined();
          expect(next!.at - refusal.at).toBeGreaterThanOrEqual(Number(refusal.retryAfter) * 1_000 - 250);
        }
      }
      for (const figure of await figures(page)) {
        expect(figure).toMatchObject({ range: '30d', error: null, busy: null });
        expect(figure.points).toBeGreaterThanOrEqual(30);
      }
      expect(pageErrors).toEqual([]);
      await page.close();
    }, 90_000);
  });

  describe('when the API asks to wait longer than the page waits (override: 1 a minute, burst 8)', () => {
    it('draws the charts it got and shows its own error in each other one, without waiting; Try again asks for that chart alone', async () => {
      // Seeding takes 2 tokens, the summary 1: 5 of the 7 series calls find one, 2 are refused
      // with a Retry-After of about a minute, more than the page's 30 s cap.
      const tenant = await harness.seededTenant(Date.now(), { plan: 'starter', rateLimitOverride: { perMinute: 1, burst: 8 } });
      const analyst = await createTestUser(harness.db.pool, tenant, 'analyst');
      const { page, answers, pageErrors } = await harness.recordingPage();
      await harness.signIn(page, tenant, analyst.email, analyst.password);
      await chartsSettled(page, '7d', 15_000);

      expect(await cardValue(page, 'mrr')).toEqual({ value: 200, text: '€200.00' });
      const all = await figures(page);
      const drawn = all.filter((f) => f.points !== null);
      const failed = all.filter((f) => f.error !== null);
      expect(drawn).toHaveLength(5);
      expect(failed).toHaveLength(2);
      for (const figure of drawn) expect(figure).toMatchObject({ range: '7d', error: null, busy: null });
      for (const figure of failed) {
        expect(figure).toMatchObject({ range: '7d', points: null, busy: null });
        expect(figure.error).toMatch(/^Rate limited: this chart could not be loaded \(the API asks to wait \d+ s\)\.$/);
      }
      expect(await page.$$eval('figure button', (buttons) => buttons.map((b) => b.textContent))).toEqual(['Try again', 'Try again']);
      expect(await page.$eval('#status', (el) => el.textContent)).toBe(
        'Showing the last 7 days (hourly points). 2 of 7 charts could not be loaded.',
      );
      const refused = answers.filter((a) => a.status === 429);
      expect(refused).toHaveLength(2); // not retried
      expect(Number(refused[0]?.retryAfter)).toBeGreaterThan(30);

      // "Try again" asks for that chart's series alone (not the range's seven), politely: after
      // the wait the API announced (capped at the page's 30 s), retried while it is refused, so
      // the chart is drawn once the bucket (1 a minute) has a token again. The other refused
      // chart keeps its error, the drawn ones are not asked for again.
      const before = answers.length;
      const metric = failed[0]?.metric ?? '';
      await page.click(`figure[data-metric="${metric}"] button`);
      await page.waitForFunction("(document.querySelector('#status')?.textContent ?? '').startsWith('Rate limited — retrying in')", {
        timeout: 5_000,
      });
      await page.waitForFunction(`document.querySelector('figure[data-metric="${metric}"]').dataset.points !== undefined`, {
        timeout: 100_000,
      });
      const after = answers.slice(before);
      expect(after.map((a) => new URL(a.url).searchParams.get('metric'))).toEqual(after.map(() => metric));
      expect(after.at(-1)).toMatchObject({ status: 200 });
      expect(after.slice(0, -1).every((a) => a.status === 429)).toBe(true);
      const again = await figures(page);
      expect(
        again
          .filter((f) => f.points !== null)
          .map((f) => f.metric)
          .sort(),
      ).toEqual([...drawn.map((f) => f.metric), metric].sort());
      expect(again.filter((f) => f.error !== null).map((f) => f.metric)).toEqual([failed[1]?.metric]);
      expect(await page.$eval('#status', (el) => el.textContent)).toBe(
        'Showing the last 7 days (hourly points). 1 of 7 charts could not be loaded.',
      );
      expect(pageErrors).toEqual([]);
      await page.close();
    }, 150_000);
  });

  describe('when the password is wrong', () => {
    it('says so next to the form', async () => {
      const tenant = await provisionTenant(harness.db.pool);
      const analyst = await createTestUser(harness.db.pool, tenant, 'analyst');
      const page = await harness.browser.newPage();
      await harness.signIn(page, tenant, analyst.email, 'not-the-password');
      await page.waitForFunction("(document.querySelector('#signin-error')?.textContent ?? '') !== ''", { timeout: 20_000 });
      expect(await page.$eval('#signin-error', (el) => el.textContent)).toBe('Wrong email or password.');
      await page.close();
    }, 60_000);
  });
});
