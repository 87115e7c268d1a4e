import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresEventStore } from '../../../shared/event-store/postgres.ts';
import { START, type EventStore } from '../../../shared/event-store/port.ts';
import type { UsageSample } from '../../../shared/metrics-bus/port.ts';
import { runProjection, waitForCheckpoint, type ProjectorHandle } from '../../../projections/runner/runner.ts';
import { kpiBillingProjection } from '../../../projections/kpi/billingProjection.ts';
import { createUsageRollupSink } from '../../../projections/kpi/usageRollup.ts';
import { analyticsRoutes } from '../../../services/analytics/routes.ts';
import { jwksRoutes, type AuthDeps } from '../../../services/auth/plugin.ts';
import { createGateway } from '../../../services/gateway/app.ts';
import { dashboardRoutes } from '../../../services/dashboard/routes.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { authCapabilities, authHeaders, createTestAuth, createTestUser, provisionTenant, type TestTenant } from '../../support/auth.ts';

/**
 * GET /dashboard in a real browser: Debian's chromium, headless, driven by puppeteer-core (no
 * browser download). The gateway listens on a real port; the page signs in through the API.
 */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

let db: TestDatabase;
let store: EventStore;
let auth: AuthDeps;
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
  app = await createGateway({
    config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
    readiness: [],
    registry: new Registry(),
    v1: authCapabilities(auth, analyticsRoutes({ pool: db.pool, store, readWaitMs: 5_000 })),
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
  await projector?.stop();
  await store?.close();
  await db?.drop();
});

/** Seeds a tenant: 3 customers (c3 cancelled 2 days ago), 4 users in the last day, 2 more 5 days ago. */
async function seededTenant(now: number): Promise<TestTenant> {
  const tenant = await provisionTenant(db.pool);
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
