import { waitFor } from '../waitFor.ts';
import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll } from 'vitest';
import { authHeaders, createTestApp, type TestTenant } from '../auth.ts';
import { createChangesHarness, type ChangesHarness } from './changes.ts';
import { webhooksCapability } from '../../../services/webhooks/capability.ts';
import { startWebhookDispatcher, type WebhookDispatcher, type WebhookDispatcherOptions } from '../../../services/webhooks/dispatcher.ts';
import { createSecretBox, type SecretBox } from '../../../services/webhooks/secrets.ts';

/** Retries 100 ms apart (six of them), so a test sees the whole schedule in about a second. */
export const FAST_RETRIES = { scheduleMs: [100, 100, 100, 100, 100, 100], jitter: 0.2, maxRetryAfterMs: 5_000 };

export type FeedPage = { data: Array<{ cursor: string; type: string; employeeId: string; employee: { firstName: string } }>; next: string };

export type Webhooks = {
  /** The change feed's harness with the webhooks capability (127.0.0.1 allow-listed). */
  readonly h: ChangesHarness;
  /** The in-process dispatcher: fast retries, a 2-s timeout, sweeps and trims every 250 ms. */
  readonly dispatcher: WebhookDispatcher;
  /** The same capability with no allow-list: what production looks like. */
  readonly strictApp: FastifyInstance;
  /** A fresh tenant and an admin's headers in it. */
  admin(): Promise<{ tenant: TestTenant; headers: Record<string, string> }>;
  /** One page of the tenant's change feed. */
  read(headers: Record<string, string>, query: string): Promise<FeedPage>;
  /** Registers an endpoint for `events`, asserted 201. */
  register(
    headers: Record<string, string>,
    url: string,
    events?: string[],
  ): Promise<{ id: string; secret: string; cursor: string; status: string }>;
  /** The endpoint as listed, once it is disabled (waits for it). */
  disabled(headers: Record<string, string>, endpointId: string): Promise<ListedEndpoint>;
};

export type ListedEndpoint = { id: string; status: string; disabledReason: string | null };

/** Webhooks on a database of their own for the calling test file (beforeAll / afterAll). */
export function useWebhooks(
  options: {
    /** The gateway's secrets (default: a fresh key, shared with the dispatcher). */
    readonly secrets?: SecretBox;
    /** The dispatcher's, when it differs from the gateway's. */
    readonly dispatcherSecrets?: SecretBox;
    /** Drains as timers in the test's process (the all-in-one process without Redis) instead of BullMQ jobs. */
    readonly inProcess?: boolean;
    /** Overrides of the dispatcher's test settings. */
    readonly dispatcher?: Partial<
      Pick<
        WebhookDispatcherOptions,
        | 'timeoutMs'
        | 'retry'
        | 'concurrency'
        | 'sweepEveryMs'
        | 'tenantConcurrency'
        | 'jobBudgetMs'
        | 'batchPerJob'
        | 'scanWindow'
        | 'logger'
        | 'targets'
      >
    >;
  } = {},
): Webhooks {
  const secrets = options.secrets ?? createSecretBox(randomBytes(32));
  let started: { h: ChangesHarness; dispatcher: WebhookDispatcher; strictApp: FastifyInstance } | undefined;
  beforeAll(async () => {
    const h = await createChangesHarness((db) => webhooksCapability({ pool: db.pool, secrets, targets: { allowHosts: ['127.0.0.1'] } }));
    const dispatcher = await startWebhookDispatcher({
      pool: h.db.pool,
      databaseUrl: h.db.url,
      ...(!options.inProcess && { redisUrl: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379' }),
      prefix: `test-wh-${randomBytes(4).toString('hex')}`,
      secrets: options.dispatcherSecrets ?? secrets,
      targets: { allowHosts: ['127.0.0.1'] },
      retry: FAST_RETRIES,
      timeoutMs: 2_000,
      sweepEveryMs: 250,
      trimEveryMs: 250, // the default 30-day retention; the retention tests age entries
      ...options.dispatcher,
    });
    const strictApp = await createTestApp(h.auth, webhooksCapability({ pool: h.db.pool, secrets, targets: { allowHosts: [] } }));
    started = { h, dispatcher, strictApp };
  });
  afterAll(async () => {
    await started?.strictApp.close();
    await started?.dispatcher.close();
    await started?.h.close();
  });

  const running = () => {
    if (!started) throw new Error('useWebhooks: it starts in beforeAll');
    return started;
  };
  return {
    get h() {
      return running().h;
    },
    get dispatcher() {
      return running().dispatcher;
    },
    get strictApp() {
      return running().strictApp;
    },
    async admin() {
      const { h } = running();
      const { tenant } = await h.tenant();
      return { tenant, headers: await authHeaders(h.auth, tenant, 'admin') };
    },
    async read(headers, query) {
      const response = await running().h.app.inject({ method: 'GET', url: `/v1/employees/changes?${query}`, headers });
      if (response.statusCode !== 200) throw new Error(`${response.statusCode} ${response.body}`);
      return response.json<FeedPage>();
    },
    async register(headers, url, events = ['employee.hired', 'employee.details_changed']) {
      const response = await running().h.app.inject({ method: 'POST', url: '/v1/webhooks', headers, payload: { url, events } });
      if (response.statusCode !== 201) throw new Error(`${response.statusCode} ${response.body}`);
      return response.json<{ id: string; secret: string; cursor: string; status: string }>();
    },
    disabled: (headers, endpointId) =>
      waitFor(async () => {
        const list = (await running().h.app.inject({ method: 'GET', url: '/v1/webhooks', headers })).json<{ data: ListedEndpoint[] }>();
        const found = list.data.find((e) => e.id === endpointId);
        return found?.status === 'disabled' ? found : undefined;
      }),
  };
}
