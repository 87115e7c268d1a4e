import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { START, type EventStore } from '../../../shared/event-store/port.ts';
import type { UsageSample } from '../../../shared/metrics-bus/port.ts';
import { runProjection, waitForCheckpoint, type ProjectorHandle } from '../../../projections/runner/runner.ts';
import { kpiBillingProjection } from '../../../projections/kpi/billingProjection.ts';
import { createUsageRollupSink } from '../../../projections/kpi/usageRollup.ts';
import { analyticsRoutes } from '../../../services/analytics/routes.ts';
import { jwksRoutes, type AuthDeps } from '../../../services/auth/plugin.ts';
import { createGateway } from '../../../services/gateway/app.ts';
import { rateLimited } from '../../../services/gateway/rateLimit.ts';
import type { Plan, RateLimitOverride } from '../../../services/gateway/requestContext.ts';
import { createRateLimiter, type RateLimiter } from '../../../shared/rate-limit/limiter.ts';
import { createRedisRateLimitStore } from '../../../shared/rate-limit/redis.ts';
import { dashboardRoutes } from '../../../services/dashboard/routes.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { authCapabilities, authHeaders, createTestAuth, createTestUser, provisionTenant, type TestTenant } from '../../support/auth.ts';

/**
 * GET /dashboard in a real browser: Debian's chromium, headless, driven by puppeteer-core (no
 * browser download). The gateway listens on a real port, with the per-tenant rate limit in Redis
 * as in production; the page signs in through the API.
 */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

let db: TestDatabase;
let store: EventStore;
let auth: AuthDeps;
let limiter: RateLimiter;
let app: FastifyInstance;
let projector: ProjectorHandle;
let browser: Browser;
let profile: string;
let base: string;

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`chromium not found at ${CHROMIUM}: install Debian's package (apt-get install -y chromium; .ci/run does it) or set CHROMIUM_PATH`);
  }
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  auth = await createTestAuth(db.pool);
  projector = runProjection(db.pool, store, kpiBillingProjection, { pollIntervalMs: 50 });
  await waitForCheckpoint(db.pool, kpiBillingProjection.name, START, 20_000);
  limiter = createRateLimiter({
    store: await createRedisRateLimitStore({ url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix: `test:rl:${randomUUID()}:` }),
    failOpen: true,
    registry: new Registry(),
    logger: pino({ level: 'silent' }),
  });
  app = await createGateway({
    config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
    readiness: [],
    registry: new Registry(),
    // As the gateway role wires it: the limiter first in the authenticated scope.
    v1: authCapabilities(auth, rateLimited(limiter), analyticsRoutes({ pool: db.pool, store, readWaitMs: 5_000 })),
    publicRoutes: [jwksRoutes(auth), dashboardRoutes],
  });
  base = await app.listen({ host: '127.0.0.1', port: 0 });
  profile = await mkdtemp(join(tmpdir(), 'eas-chromium-'));
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      `--user-data-dir=${profile}`,
    ],
  });
}, 60_000);

afterAll(async () => {
  await browser?.close();
  if (profile) await rm(profile, { recursive: true, force: true });
  await app?.close();
  await limiter?.close();
  await projector?.stop();
  await store?.close();
  await db?.drop();
});

/**
 * Seeds a tenant (Pro unless told): 3 customers (c3 cancelled 2 days ago), 4 users in the last
 * day, 2 more 5 days ago. Takes 2 tokens of the tenant's rate limit.
 */
async function seededTenant(now: number, plan: { plan?: Plan; rateLimitOverride?: RateLimitOverride } = {}): Promise<TestTenant> {
  const tenant = await provisionTenant(db.pool, plan);
  const events = [
    { customerId: 'c1', type: 'subscription.started', amount: '100', interval: 'month', occurredAt: new Date(now - 10 * DAY).toISOString() },
    { customerId: 'c2', type: 'subscription.started', amount: '1200', interval: 'year', occurredAt: new Date(now - 10 * DAY).toISOString() },
    { customerId: 'c3', type: 'subscription.started', amount: '50', interval: 'month', occurredAt: new Date(now - 5 * DAY).toISOString() },
    { customerId: 'c3', type: 'subscription.cancelled', amount: '50', interval: 'month', occurredAt: new Date(now - 2 * DAY).toISOString() },
  ].map((e) => ({ eventId: randomUUID(), currency: 'EUR', ...e }));
  const admin = await authHeaders(auth, tenant, 'admin');
  const ingest = await app.inject({ method: 'POST', url: '/v1/analytics/billing-events', headers: admin, payload: { events } });
  expect(ingest.statusCode).toBe(202);
  const read = await app.inject({ method: 'GET', url: '/v1/analytics/kpi', headers: { ...admin, 'x-min-position': ingest.json<{ position: string }>().position } });
  expect(read.statusCode).toBe(200);
  // 100 requests of 1 … 100 ms by u1 … u4 two hours ago; u5, u6 five days ago.
  const samples: UsageSample[] = [];
  for (let i = 1; i <= 100; i++) {
    samples.push({ tenantId: tenant.tenantId, userId: `u${1 + (i % 4)}`, route: '/v1/employees', method: 'GET', status: 200, durationMs: i, timestamp: now - 2 * HOUR + i * 1_000 });
  }
  for (const user of ['u5', 'u6']) {
    samples.push({ tenantId: tenant.tenantId, userId: user, route: '/v1/employees', method: 'GET', status: 200, durationMs: 5, timestamp: now - 5 * DAY });
  }
  await createUsageRollupSink(db.pool, { group: `g-${randomUUID()}` }).apply({ origin: null, samples });
  return tenant;
}

async function signIn(page: Page, tenant: TestTenant, email: string, password: string) {
  await page.goto(`${base}/dashboard`);
  await page.waitForSelector('#signin-form');
  await page.type('#tenant', tenant.slug);
  await page.type('#email', email);
  await page.type('#password', password);
  await page.keyboard.press('Enter'); // keyboard only: the form submits on Enter
}

/** Another user of the tenant spends what is left of its bucket (one bucket for all its users), until refused. */
async function emptyBucket(tenant: TestTenant) {
  const headers = await authHeaders(auth, tenant, 'admin');
  for (let i = 0; i < 30; i++) {
    if ((await app.inject({ method: 'GET', url: '/v1/roles', headers })).statusCode === 429) return;
  }
  throw new Error('the bucket never ran out');
}

type Answer = { url: string; status: number; at: number; retryAfter: string | undefined };

/** Answers by URL (one call and its retries share a URL), in order. */
function byCall(answers: readonly Answer[]): Map<string, Answer[]> {
  const calls = new Map<string, Answer[]>();
  for (const answer of answers) calls.set(answer.url, [...(calls.get(answer.url) ?? []), answer]);
  return calls;
}

/** A page that records its /v1/analytics traffic as the browser saw it, and every text of the status line. */
async function recordingPage() {
  const page = await browser.newPage();
  const requests: Array<{ url: string; at: number }> = [];
  const answers: Answer[] = [];
  const pageErrors: string[] = [];
  const analytics = (url: string) => new URL(url).pathname.startsWith('/v1/analytics/');
  page.on('request', (request) => void (analytics(request.url()) && requests.push({ url: request.url(), at: Date.now() })));
  page.on('response', (response) => {
    if (analytics(response.url())) answers.push({ url: response.url(), status: response.status(), at: Date.now(), retryAfter: response.headers()['retry-after'] });
  });
  page.on('pageerror', (error) => pageErrors.push(String(error)));
  await page.evaluateOnNewDocument(`document.addEventListener('DOMContentLoaded', () => {
    const status = document.getElementById('status');
    window.statusTexts = [];
    new MutationObserver(() => window.statusTexts.push(status.textContent)).observe(status, { childList: true, characterData: true, subtree: true });
  })`);
  await page.setViewport({ width: 1280, height: 1100 });
  const statusTexts = async () => (await page.evaluate('window.statusTexts')) as string[];
  return { page, requests, answers, pageErrors, statusTexts };
}

/**
 * A Starter tenant's analyst signed in, the first charts drawn, then the tenant's bucket emptied
 * by another of its users: the page's next calls meet the limit.
 */
async function starterSignedInWithEmptyBucket() {
  const tenant = await seededTenant(Date.now(), { plan: 'starter' });
  const analyst = await createTestUser(db.pool, tenant, 'analyst');
  const recording = await recordingPage();
  await signIn(recording.page, tenant, analyst.email, analyst.password);
  await chartsSettled(recording.page, '7d', 30_000);
  await sleep(1_100); // any pause the page took after a last token is over: its next calls go out at once
  await emptyBucket(tenant);
  return recording;
}

/** Every chart's state: the range it shows, its points or its own error. */
const figures = (page: Page) =>
  page.$$eval('figure[data-metric]', (all) =>
    all.map((figure) => ({
      metric: figure.getAttribute('data-metric'),
      range: figure.getAttribute('data-range'),
      points: figure.hasAttribute('data-points') ? Number(figure.getAttribute('data-points')) : null,
      error: figure.querySelector('.error')?.textContent ?? null,
      busy: figure.getAttribute('aria-busy'),
    })),
  );

/** Waits until every chart of `range` is answered (drawn or failed); on a timeout, says what the page shows. */
async function chartsSettled(page: Page, range: string, timeout: number) {
  const settled = `document.querySelector('#charts')?.getAttribute('data-range') === '${range}' && document.querySelector('#charts').getAttribute('aria-busy') === 'false'`;
  try {
    await page.waitForFunction(settled, { timeout });
  } catch (error) {
    const status = await page.$eval('#status', (el) => el.textContent).catch(() => '?');
    throw new Error(`the charts of ${range} did not settle within ${timeout} ms; the status line says: ${status}`, { cause: error });
  }
}

const cardValue = (page: Page, metric: string) =>
  page.$eval(`.value[data-metric="${metric}"]`, (el) => ({ value: Number(el.getAttribute('data-value')), text: el.textContent ?? '' }));

describe('GET /dashboard in headless chromium', () => {
  describe('when an analyst signs in', () => {
    it('shows the cards with the seeded numbers, and the charts change with the range', async () => {
      const now = Date.now();
      const tenant = await seededTenant(now);
      const analyst = await createTestUser(db.pool, tenant, 'analyst');
      const page = await browser.newPage();
      const failures: string[] = [];
      page.on('pageerror', (error) => failures.push(String(error)));
      page.on('requestfailed', (request) => failures.push(`${request.url()} ${request.failure()?.errorText}`));
      page.on('console', (message) => message.type() === 'error' && failures.push(message.text()));
      await page.setViewport({ width: 1280, height: 1100 });
      await signIn(page, tenant, analyst.email, analyst.password);
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
      const tenant = await seededTenant(Date.now());
      const analyst = await createTestUser(db.pool, tenant, 'analyst');
      const page = await browser.newPage();
      await signIn(page, tenant, analyst.email, analyst.password);
      await page.waitForFunction("document.querySelectorAll('figure[data-points]').length === 7", { timeout: 20_000 });
      // The access token "expires": the next API call gets 401, the page refreshes and retries.
      await page.evaluate(`(() => {
        const s = JSON.parse(sessionStorage.getItem('kpi-session'));
        sessionStorage.setItem('kpi-session', JSON.stringify({ ...s, accessToken: 'expired.token.value' }));
      })()`);
      await page.reload();
      await page.waitForFunction(`document.querySelector('.value[data-metric="mrr"]')?.getAttribute('data-value') === '200'`, { timeout: 20_000 });
      const stored = JSON.parse(String(await page.evaluate(`sessionStorage.getItem('kpi-session')`))) as Record<string, string>;
      expect(stored.accessToken).not.toBe('expired.token.value');
      expect(await page.$eval('#signin', (el) => el.hasAttribute('hidden'))).toBe(true);
      await page.close();
    }, 60_000);
  });

  describe('when a user without analytics:read signs in (role employee)', () => {
    it('shows a clear message instead of a broken page', async () => {
      const tenant = await provisionTenant(db.pool);
      const employee = await createTestUser(db.pool, tenant, 'employee');
      const page = await browser.newPage();
      await signIn(page, tenant, employee.email, employee.password);
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
      const { page, answers, pageErrors, statusTexts } = await starterSignedInWithEmptyBucket();

      for (const range of ['30d', '365d', '24h', '30d', '90d']) {
        await page.click(`input[name="range"][value="${range}"]`);
        await sleep(150);
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
      await sleep(1_500);
      await settled();
      expect(await page.$eval('#charts', (el) => el.getAttribute('data-range'))).toBe('90d');
      expect(pageErrors).toEqual([]);
      await page.close();
    }, 90_000);

    it('retries each refused call after its Retry-After and draws every chart from the retries', async () => {
      const { page, requests, answers, pageErrors } = await starterSignedInWithEmptyBucket();
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
      const tenant = await seededTenant(Date.now(), { plan: 'starter', rateLimitOverride: { perMinute: 1, burst: 8 } });
      const analyst = await createTestUser(db.pool, tenant, 'analyst');
      const { page, answers, pageErrors } = await recordingPage();
      await signIn(page, tenant, analyst.email, analyst.password);
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
      expect(await page.$eval('#status', (el) => el.textContent)).toBe('Showing the last 7 days (hourly points). 2 of 7 charts could not be loaded.');
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
      await page.waitForFunction("(document.querySelector('#status')?.textContent ?? '').startsWith('Rate limited — retrying in')", { timeout: 5_000 });
      await page.waitForFunction(`document.querySelector('figure[data-metric="${metric}"]').dataset.points !== undefined`, { timeout: 100_000 });
      const after = answers.slice(before);
      expect(after.map((a) => new URL(a.url).searchParams.get('metric'))).toEqual(after.map(() => metric));
      expect(after.at(-1)).toMatchObject({ status: 200 });
      expect(after.slice(0, -1).every((a) => a.status === 429)).toBe(true);
      const again = await figures(page);
      expect(again.filter((f) => f.points !== null).map((f) => f.metric).sort()).toEqual([...drawn.map((f) => f.metric), metric].sort());
      expect(again.filter((f) => f.error !== null).map((f) => f.metric)).toEqual([failed[1]?.metric]);
      expect(await page.$eval('#status', (el) => el.textContent)).toBe('Showing the last 7 days (hourly points). 1 of 7 charts could not be loaded.');
      expect(pageErrors).toEqual([]);
      await page.close();
    }, 150_000);
  });

  describe('when the password is wrong', () => {
    it('says so next to the form', async () => {
      const tenant = await provisionTenant(db.pool);
      const analyst = await createTestUser(db.pool, tenant, 'analyst');
      const page = await browser.newPage();
      await signIn(page, tenant, analyst.email, 'not-the-password');
      await page.waitForFunction("(document.querySelector('#signin-error')?.textContent ?? '') !== ''", { timeout: 20_000 });
      expect(await page.$eval('#signin-error', (el) => el.textContent)).toBe('Wrong email or password.');
      await page.close();
    }, 60_000);
  });
});
