import { randomUUID } from 'node:crypto';
import { setTimeout } from 'node:timers/promises';
import type { DatabasePool } from '../../shared/db/pool.ts';
import type { Logger } from '../../shared/logger.ts';
import { CHANGES_PROJECTION } from '../../projections/changes/changesProjection.ts';
import { readCheckpoint } from '../../shared/projections/checkpoints.ts';
import { createChangeWakeups } from '../changes/wakeups.ts';
import { ATTEMPT_STEPS, createDeliveryRun } from './deliveryRun.ts';
import { DEFAULT_RETRY_POLICY, type RetryPolicy } from './schedule.ts';
import type { SecretBox } from './secrets.ts';
import { trimDeliveries } from './deliveryLog.ts';
import { acquireLease, dueEndpoints, releaseLease, SCAN_WINDOW } from './lease.ts';
import type { TargetPolicy } from './targets.ts';
import { bullmqTriggers, inProcessTriggers, type DrainJob, type DrainTriggers } from './triggers.ts';

export const WEBHOOK_QUEUE = 'webhook-delivery';
export const DEFAULT_DELIVERY_RETENTION_MS = 30 * 86_400_000;
export const DEFAULT_TENANT_CONCURRENCY = 4;

export type WebhookDispatcherOptions = {
  readonly pool: DatabasePool;
  /** For the LISTEN connection that wakes dispatch when the changes projection commits. */
  readonly databaseUrl: string;
  /** BullMQ's Redis: drains are jobs shared by every worker. Absent: they run in this process (the all-in-one process without Redis). */
  readonly redisUrl?: string;
  /** BullMQ key prefix (QUEUE_PREFIX); unused without Redis. */
  readonly prefix: string;
  readonly secrets: SecretBox;
  readonly targets: TargetPolicy;
  readonly retry?: RetryPolicy;
  /** Per attempt (default 15 s). */
  readonly timeoutMs?: number;
  /** How often PostgreSQL is swept for endpoints with work and no job (e.g. after Redis lost its jobs). */
  readonly sweepEveryMs?: number;
  /** Deliveries in flight at once, across endpoints; per endpoint it is always one (in order). */
  readonly concurrency?: number;
  /** Deliveries one job makes before it yields its slot to other endpoints (read and recorded a page at a time). */
  readonly batchPerJob?: number;
  /**
   * How long one job may go on starting deliveries before it yields its slot (default 60 s; the
   * attempt in flight then ends within its timeout).
   */
  readonly jobBudgetMs?: number;
  /** Deliveries in flight at once for one tenant, across every worker (default 4): its share of the slots. */
  readonly tenantConcurrency?: number;
  /** How many changes after an endpoint's cursor the sweep and a run look at (default SCAN_WINDOW). */
  readonly scanWindow?: number;
  readonly logger?: Pick<Logger, 'info' | 'warn' | 'error'>;
  readonly random?: () => number;
  /** The delivery log keeps an entry this long after its last attempt (default 30 days; a retry whose time has not come is always kept). */
  readonly deliveryRetentionMs?: number;
  /** How often the delivery log is trimmed (default hourly, and once at start). */
  readonly trimEveryMs?: number;
};

export type WebhookDispatcher = {
  /** Sweeps now (tests, and after a replay request). */
  sweep(): Promise<void>;
  /** Trims the delivery log now (retention); resolves to how many entries went. */
  trim(): Promise<number>;
  close(): Promise<void>;
};

/**
 * Delivers every endpoint's changes, in order, at least once.
 *
 * PostgreSQL holds all delivery state: each endpoint's cursor (the last change it acknowledged),
 * its failed-attempt count and next-attempt time, and a lease that lets one worker at a time
 * deliver to it, so one delivery per endpoint is in flight and the cursor moves only after a 2xx.
 * BullMQ jobs are triggers: "drain endpoint E" now (from the sweep, woken by the changes
 * projection's NOTIFY and on a timer) or at its retry time (a delayed job); without Redis they
 * are timers in this process (`triggers.ts`). If Redis loses every job, or the process its
 * timers, the next sweep re-creates them from PostgreSQL; if a worker dies mid-delivery, its lease
 * runs out and the change is delivered again (same `webhook-id`). A failing endpoint holds only
 * its own lease: the others keep going.
 */
export async function startWebhookDispatcher(options: WebhookDispatcherOptions): Promise<WebhookDispatcher> {
  const { pool, secrets, targets, prefix, logger } = options;
  const retry = options.retry ?? DEFAULT_RETRY_POLICY;
  const timeoutMs = options.timeoutMs ?? 15_000;
  // Renewed when less is left than an attempt's steps need (deliveryRun.ts): 30 s of sending between renewals.
  const leaseMs = ATTEMPT_STEPS * timeoutMs + 30_000;
  const batchPerJob = options.batchPerJob ?? 500;
  const jobBudgetMs = options.jobBudgetMs ?? 60_000;
  const tenantShare = options.tenantConcurrency ?? DEFAULT_TENANT_CONCURRENCY;
  const scanWindow = options.scanWindow ?? SCAN_WINDOW;
  const random = options.random ?? Math.random;
  // The delivery log's retention: without it the log grows by a row per change per endpoint.
  const retentionMs = options.deliveryRetentionMs ?? DEFAULT_DELIVERY_RETENTION_MS;

  // Operators retiring an old secrets key look for endpoints sealed under another id than this one.
  logger?.info({ keyId: secrets.keyId }, 'webhook signing secrets sealed with this key id');
  // Aborted by close: the sweep stops, and a drain stops after the delivery in flight.
  const stop = new AbortController();

  const deliverRun = createDeliveryRun({
    pool,
    secrets,
    targets,
    retry,
    timeoutMs,
    leaseMs,
    random,
    ...(logger && { logger }),
    stop: stop.signal,
    scanWindow,
    retentionMs,
    // Read at call time: the triggers are created below, before any drain runs.
    triggers: { add: (job, addOptions) => triggers.add(job, addOptions) },
  });

  const drain = async (job: DrainJob) => {
    const token = randomUUID();
    const endpoint = await acquireLease(pool, job.tenantId, job.endpointId, token, leaseMs, tenantShare, scanWindow);
    // Someone else is delivering to it, it is gone/disabled, its tenant has its share in flight,
    // or siblings that waited longer are due for the slots left.
    if (!endpoint) return;
    // A job yields its slot after a count and a time: slow receivers take turns with everyone else's.
    const until = Date.now() + jobBudgetMs;
    let made = 0;
    try {
      for (;;) {
        const run = await deliverRun(endpoint, token, batchPerJob - made, until);
        made += run.delivered;
        if (!run.more || made >= batchPerJob || Date.now() >= until) break;
      }
    } finally {
      await releaseLease(pool, job.tenantId, job.endpointId, token);
    }
    // Closes the gap between our last look and the release: the tenant's endpoints that found its
    // share taken get a job, longest waiting first, and then this one, if work is due now (after
    // a replay's hand-off, the changes from its cursor, the rest of a run cut short), behind them
    // and those already waiting: the slot it freed goes to a sibling (acquireLease keeps it so).
    const waiting = (await dueEndpoints(pool, tenantShare, { tenantId: job.tenantId }, scanWindow)).filter((d) => d.id !== job.endpointId);
    await triggers.addBulk(waiting.map((d) => ({ job: { endpointId: d.id, tenantId: d.tenantId }, stateSeen: d.stateSeen })));
    if ((await dueEndpoints(pool, 1, job.endpointId, scanWindow)).length > 0) await triggers.add(job);
  };

  const triggerOptions = { concurrency: options.concurrency ?? 16, ...(logger && { logger }) };
  const triggers: DrainTriggers = options.redisUrl
    ? await bullmqTriggers(drain, { ...triggerOptions, redisUrl: options.redisUrl, prefix, queueName: WEBHOOK_QUEUE })
    : inProcessTriggers(drain, triggerOptions);

  let sweeping: Promise<void> | undefined;
  let again = false;
  const sweepOnce = async () => {
    const due = await dueEndpoints(pool, 1_000, undefined, scanWindow);
    await triggers.addBulk(due.map((d) => ({ job: { endpointId: d.id, tenantId: d.tenantId }, stateSeen: d.stateSeen })));
  };
  const sweep = (): Promise<void> => {
    if (sweeping) {
      again = true;
      return sweeping;
    }
    sweeping = (async () => {
      do {
        again = false;
        await sweepOnce().catch((error: unknown) => logger?.warn({ err: error }, 'webhook sweep failed; retrying on the next one'));
      } while (again);
    })().finally(() => (sweeping = undefined));
    return sweeping;
  };

  const wakeups = createChangeWakeups(options.databaseUrl);
  const watch = await wakeups.watch('*');
  // The change feed is built by its projector, perhaps in another process and still starting
  // (a first start, seconds): the sweeps, which read it, begin once it has a checkpoint.
  const feedBuilt = () =>
    readCheckpoint(pool, CHANGES_PROJECTION).then(
      (checkpoint) => checkpoint !== null,
      (error: unknown) => {
        logger?.warn({ err: error }, 'webhook dispatcher could not read the change feed checkpoint; trying again');
        return false;
      },
    );
  const loop = (async () => {
    while (!stop.signal.aborted && !(await feedBuilt())) await watch.wait(500, stop.signal);
    while (!stop.signal.aborted) {
      await sweep();
      await watch.wait(options.sweepEveryMs ?? 5_000, stop.signal);
    }
  })();

  const trim = () => trimDeliveries(pool, new Date(Date.now() - retentionMs));
  const trimLoop = (async () => {
    while (!stop.signal.aborted) {
      const deleted = await trim().catch((error: unknown) => {
        logger?.warn({ err: error }, 'webhook delivery log trim failed; retrying on the next one');
        return 0;
      });
      if (deleted > 0) logger?.info({ deleted, retentionMs }, 'webhook delivery log trimmed');
      await setTimeout(options.trimEveryMs ?? 3_600_000, undefined, { signal: stop.signal }).catch(() => undefined);
    }
  })();

  return {
    sweep,
    trim,
    async close() {
      stop.abort();
      watch.cancel();
      await loop;
      await trimLoop;
      await sweeping;
      await wakeups.close();
      await triggers.close();
    },
  };
}
