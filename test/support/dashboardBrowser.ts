import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import type { Page } from 'puppeteer-core';
import { ulid } from 'ulid';
import { Registry } from 'prom-client';
import { expect } from 'vitest';
import { createPostgresEventStore } from '../../shared/event-store/postgres/eventStore.ts';
import { START } from '../../shared/event-store/port.ts';
import type { UsageSample, UsageSamplePublisher } from '../../shared/metrics-bus/port.ts';
import { createInProcessBus } from '../../shared/metrics-bus/inProcess.ts';
import type { DatabasePool } from '../../shared/db/pool.ts';
import { startKpiConsumer } from '../../projections/kpi/consumer.ts';
import { usageSamples } from '../../services/analytics/usageSamples.ts';
import { runProjection } from '../../shared/projections/follow.ts';
import type { Projection } from '../../shared/projections/projection.ts';
import { waitForCheckpoint } from '../../shared/projections/readYourWrites.ts';
import { kpiBillingProjection } from '../../projections/kpi/billingProjection.ts';
import { workforceProjection } from '../../projections/workforce/workforceProjection.ts';
import { changeEmployeeStatus, hireEmployee } from '../../services/employees/commands.ts';
import { createUsageRollupSink } from '../../projections/kpi/usageRollup.ts';
import { analyticsRoutes } from '../../services/analytics/routes.ts';
import { billingRoutes } from '../../services/billing/routes.ts';
import { jwksRoutes } from '../../services/auth/plugin.ts';
import { createGateway } from '../../services/gateway/app.ts';
import { rateLimited } from '../../services/gateway/rateLimit.ts';
import type { Plan, RateLimitOverride } from '../../services/gateway/requestContext.ts';
import { createRateLimiter } from '../../shared/rate-limit/limiter.ts';
import { createRedisRateLimitStore } from '../../shared/rate-limit/redis.ts';
import { dashboardRoutes } from '../../services/dashboard/routes.ts';
import { launchChromium } from './chromium.ts';
import { createTestDatabase } from './database.ts';
import { authCapabilities, authHeaders, createTestAuth, createTestUser, provisionTenant, type TestTenant } from './auth.ts';
import { testEmailHash } from './personalData.ts';

/**
 * GET /dashboard in a real browser: Debian's chromium, headless, driven by puppeteer-core (no
 * browser download). The gateway listens on a real port, with the per-tenant rate limit in Redis
 * as in production; the page signs in through the API.
 */
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

export type DashboardHarness = Awaited<ReturnType<typeof start>>;

export type DashboardHarnessOptions = {
  /**
   * The gateway's own requests become usage samples, through an in-process bus and the KPI
   * consumer into the rollups, as `npm start` wires them. `record` picks the samples that count
   * (default: all), so a test can keep the page's own reads out of what it measures.
   */
  readonly usage?: { readonly record?: (sample: UsageSample) => boolean };
};

/** The gateway with the analytics routes and the page, the KPI and workforce projectors, and chromium; `close` stops them all. */
export async function startDashboardHarness(options: DashboardHarnessOptions = {}): Promise<DashboardHarness> {
  // What is started, stopped in reverse order by `close`, or at once if a later step fails.
  const stops: Array<() => Promise<unknown>> = [];
  const stopAll = async () => {
    for (const stop of stops.splice(0).reverse()) await stop();
  };
  try {
    return await start(stops, stopAll, options);
  } catch (error) {
    await stopAll();
    throw error;
  }
}

async function start(stops: Array<() => Promise<unknown>>, close: () => Promise<void>, options: DashboardHarnessOptions) {
  const db = await createTestDatabase();
  stops.push(() => db.drop());
  const store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  stops.push(() => store.close());
  const auth = await createTestAuth(db.pool);
  for (const projection of [kpiBillingProjection, workforceProjection] as readonly Projection[]) {
    const projector = runProjection(db.pool, store, projection, { pollIntervalMs: 50 });
    stops.push(() => projector.stop());
    await waitForCheckpoint(db.pool, projection.name, START, 20_000);
  }
  const limiter = createRateLimiter({
    store: await createRedisRateLimitStore({ url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix: `test:rl:${randomUUID()}:` }),
    failOpen: true,
    registry: new Registry(),
    logger: pino({ level: 'silent' }),
  });
  stops.push(() => limiter.close());
  const usage = await usagePipeline(db.pool, options.usage, stops);
  const app = await createGateway({
    config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
    readiness: [],
    registry: new Registry(),
    // As the gateway role wires it: the limiter first in the authenticated scope.
    v1: authCapabilities(
      auth,
      rateLimited(limiter),
      ...(usage ? [usageSamples(usage.publisher)] : []),
      analyticsRoutes({ pool: db.pool, store, readWaitMs: 5_000, ...(usage ? { usage: { source: usage.source } } : {}) }),
      billingRoutes({ store }),
    ),
    publicRoutes: [jwksRoutes(auth), dashboardRoutes],
  });
  stops.push(() => app.close());
  const base = await app.listen({ host: '127.0.0.1', port: 0 });
  const chromium = await launchChromium();
  stops.push(() => chromium.close());
  const browser = chromium.browser;

  /**
   * Seeds a tenant (Pro unless told): 3 customers (c3 cancelled 2 days ago), 4 users in the last
   * day, 2 more 5 days ago. Takes 2 tokens of the tenant's rate limit.
   */
  async function seededTenant(now: number, plan: { plan?: Plan; rateLimitOverride?: RateLimitOverride } = {}): Promise<TestTenant> {
    const tenant = await provisionTenant(db.pool, plan);
    const events = [
      {
        customerId: 'c1',
        type: 'subscription.started',
        amount: '100',
        interval: 'month',
        occurredAt: new Date(now - 10 * DAY).toISOString(),
      },
      {
        customerId: 'c2',
        type: 'subscription.started',
        amount: '1200',
        interval: 'year',
        occurredAt: new Date(now - 10 * DAY).toISOString(),
      },
      {
        customerId: 'c3',
        type: 'subscription.started',
        amount: '50',
        interval: 'month',
        occurredAt: new Date(now - 5 * DAY).toISOString(),
      },
      {
        customerId: 'c3',
        type: 'subscription.cancelled',
        amount: '50',
        interval: 'month',
        occurredAt: new Date(now - 2 * DAY).toISOString(),
      },
    ].map((e) => ({ eventId: randomUUID(), currency: 'EUR', ...e }));
    const admin = await authHeaders(auth, tenant, 'admin');
    const ingest = await app.inject({ method: 'POST', url: '/v1/analytics/billing-events', headers: admin, payload: { events } });
    expect(ingest.statusCode).toBe(202);
    const read = await app.inject({
      method: 'GET',
      url: '/v1/analytics/kpi',
      headers: { ...admin, 'x-min-position': ingest.json<{ position: string }>().position },
    });
    expect(read.statusCode).toBe(200);
    // 100 requests of 1 … 100 ms by u1 … u4 two hours ago; u5, u6 five days ago.
    const samples: UsageSample[] = [];
    for (let i = 1; i <= 100; i++) {
      samples.push({
        tenantId: tenant.tenantId,
        userId: `u${1 + (i % 4)}`,
        route: '/v1/employees',
        method: 'GET',
        status: 200,
        durationMs: i,
        timestamp: now - 2 * HOUR + i * 1_000,
      });
    }
    for (const user of ['u5', 'u6']) {
      samples.push({
        tenantId: tenant.tenantId,
        userId: user,
        route: '/v1/employees',
        method: 'GET',
        status: 200,
        durationMs: 5,
        timestamp: now - 5 * DAY,
      });
    }
    await createUsageRollupSink(db.pool, { group: `g-${randomUUID()}` }).apply({ origin: null, samples });
    return tenant;
  }

  /**
   * A tenant with a small workforce history, days before `now`: hired in sales 60 and 20 days ago,
   * in eng 10 and 5 days ago, one without a department 8 days ago; the eng hire of 10 days ago left
   * 3 days ago. Written as commands (no rate-limit token); resolves once the workforce model has it.
   */
  async function workforceTenant(now: number): Promise<TestTenant> {
    const tenant = await provisionTenant(db.pool);
    const ports = { store, emailHash: testEmailHash, assertRoleExists: async () => undefined };
    const metadata = { tenantId: tenant.tenantId, actor: 'spec', now: new Date(now).toISOString() };
    const hire = async (daysAgo: number, department?: string) => {
      const employeeId = ulid();
      const hiredAt = new Date(now - daysAgo * DAY).toISOString();
      const data = {
        employeeId,
        email: `${employeeId}@example.test`,
        firstName: 'F',
        lastName: 'L',
        hiredAt,
        ...(department && { department }),
      };
      await hireEmployee(ports, { type: 'HireEmployee', data, metadata });
      return employeeId;
    };
    await hire(60, 'sales');
    await hire(20, 'sales');
    const leaver = await hire(10, 'eng');
    await hire(5, 'eng');
    await hire(8);
    const exit = await changeEmployeeStatus(ports, leaver, metadata, {
      status: 'inactive',
      effectiveAt: new Date(now - 3 * DAY).toISOString(),
    });
    if (!exit.position) throw new Error('the exit was not appended');
    expect(await waitForCheckpoint(db.pool, workforceProjection.name, exit.position, 20_000)).toBe(true);
    return tenant;
  }

  async function signIn(page: Page, tenant: TestTenant, email: string, password: string, path = '/dashboard') {
    await page.goto(`${base}${path}`);
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

  /** A page that records its /v1/analytics traffic as the browser saw it, and every text of the status line. */
  async function recordingPage() {
    const page = await browser.newPage();
    const requests: Array<{ url: string; at: number }> = [];
    const answers: Answer[] = [];
    const pageErrors: string[] = [];
    const analytics = (url: string) => new URL(url).pathname.startsWith('/v1/analytics/');
    page.on('request', (request) => void (analytics(request.url()) && requests.push({ url: request.url(), at: Date.now() })));
    page.on('response', (response) => {
      if (analytics(response.url()))
        answers.push({ url: response.url(), status: response.status(), at: Date.now(), retryAfter: response.headers()['retry-after'] });
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
    // A clock, not a signal: a pause the page took after a last token (at most the bucket's
    // 1-second refill) is over, so its next calls go out at once into the bucket emptied below.
    await sleep(1_100);
    await emptyBucket(tenant);
    return recording;
  }

  return {
    db,
    auth,
    base,
    browser,
    seededTenant,
    workforceTenant,
    signIn,
    recordingPage,
    starterSignedInWithEmptyBucket,
    close,
  };
}

export type Answer = { url: string; status: number; at: number; retryAfter: string | undefined };

/** Answers by URL (one call and its retries share a URL), in order. */
export function byCall(answers: readonly Answer[]): Map<string, Answer[]> {
  const calls = new Map<string, Answer[]>();
  for (const answer of answers) calls.set(answer.url, [...(calls.get(answer.url) ?? []), answer]);
  return calls;
}

/** Every chart's state: the range it shows, its points or its own error. */
export const figures = (page: Page) =>
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
export async function chartsSettled(page: Page, range: string, timeout: number) {
  const settled = `document.querySelector('#charts')?.getAttribute('data-range') === '${range}' && document.querySelector('#charts').getAttribute('aria-busy') === 'false'`;
  try {
    await page.waitForFunction(settled, { timeout });
  } catch (error) {
    const status = await page.$eval('#status', (el) => el.textContent).catch(() => '?');
    throw new Error(`the charts of ${range} did not settle within ${timeout} ms; the status line says: ${status}`, { cause: error });
  }
}

/** Waits until the Workforce section's charts of `range` are answered; on a timeout, says what the section shows. */
export async function workforceSettled(page: Page, range: string, timeout: number) {
  const settled = `document.querySelector('#workforce-charts')?.getAttribute('data-range') === '${range}' && document.querySelector('#workforce-charts').getAttribute('aria-busy') === 'false'`;
  try {
    await page.waitForFunction(settled, { timeout });
  } catch (error) {
    const status = await page.$eval('#workforce-status', (el) => el.textContent).catch(() => '?');
    throw new Error(`the workforce charts of ${range} did not settle within ${timeout} ms; the section says: ${status}`, { cause: error });
  }
}

export type WorkforceFigure = {
  range: string | null;
  points: number | null;
  /** 'true' when the last bucket is still open. */
  partial: string | null;
  series: Array<{ label: string; values: number[] }>;
  legend: Array<string | null>;
  caption: string;
  error: string | null;
  canvas: boolean;
};

/** Each Workforce chart by id: its points, whether its last bucket is open, its series' values, its caption or its error. */
export const workforceFigures = (page: Page): Promise<Record<string, WorkforceFigure>> =>
  page.$$eval('figure[data-workforce]', (all) =>
    Object.fromEntries(
      all.map((figure) => [
        figure.getAttribute('data-workforce'),
        {
          range: figure.getAttribute('data-range'),
          points: figure.hasAttribute('data-points') ? Number(figure.getAttribute('data-points')) : null,
          partial: figure.getAttribute('data-partial'),
          series: JSON.parse(figure.getAttribute('data-series') ?? '[]'),
          legend: [...figure.querySelectorAll('.series-legend li')].map((li) => li.textContent),
          caption: figure.querySelector('figcaption')?.textContent ?? '',
          error: figure.querySelector('.error')?.textContent ?? null,
          canvas: figure.querySelector('canvas') !== null,
        },
      ]),
    ),
  );

export const cardValue = (page: Page, metric: string) =>
  page.$eval(`.value[data-metric="${metric}"]`, (el) => ({ value: Number(el.getAttribute('data-value')), text: el.textContent ?? '' }));

/** The in-process bus from the gateway's usage hook to the KPI consumer, filtered by `record`; stopped by `stops`. */
async function usagePipeline(pool: DatabasePool, usage: DashboardHarnessOptions['usage'], stops: Array<() => Promise<unknown>>) {
  if (!usage) return undefined;
  const bus = createInProcessBus();
  const consumer = await startKpiConsumer(pool, bus.source, `kpi-${randomUUID()}`);
  stops.push(() => consumer.stop());
  const record = usage.record ?? (() => true);
  const publisher: UsageSamplePublisher = {
    publish: (sample) => void (record(sample) && bus.publisher.publish(sample)),
    flush: (timeoutMs) => bus.publisher.flush(timeoutMs),
    close: () => bus.publisher.close(),
  };
  return { publisher, source: bus.source };
}
