import { randomUUID } from 'node:crypto';
import { setTimeout } from 'node:timers/promises';
import type { DatabasePool } from '../../shared/db/pool.ts';
import type { Logger } from '../../shared/logger.ts';
import { CHANGES_PROJECTION } from '../../projections/changes/changesProjection.ts';
import { readCheckpoint } from '../../projections/runner/runner.ts';
import { readChanges, type ChangeRecord } from '../../projections/changes/queries.ts';
import { encodeCursor } from '../changes/cursor.ts';
import { toChange } from '../changes/change.ts';
import { createChangeWakeups } from '../changes/wakeups.ts';
import { sendWebhook } from './deliver.ts';
import { DEFAULT_RETRY_POLICY, nextRetryDelay, type RetryPolicy } from './schedule.ts';
import type { SecretBox } from './secrets.ts';
import { recordAttempt, recordDelivered, trimDeliveries } from './deliveryLog.ts';
import type { EndpointRecord } from './endpoints.ts';
import { acquireLease, dueEndpoints, leaseState, releaseLease } from './lease.ts';
import type { TargetPolicy } from './targets.ts';
import { bullmqTriggers, inProcessTriggers, type DrainJob, type DrainTriggers } from './triggers.ts';

export const WEBHOOK_QUEUE = 'webhook-delivery';
export const DEFAULT_DELIVERY_RETENTION_MS = 30 * 86_400_000;
/** What a lease must have left beyond an attempt's time bound when the attempt starts (recording it, clock drift). */
const LEASE_SLACK_MS = 5_000;

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
  const leaseMs = timeoutMs + 30_000;
  const batchPerJob = options.batchPerJob ?? 500;
  const random = options.random ?? Math.random;

  // Aborted by close: the sweep stops, and a drain stops after the delivery in flight.
  const stop = new AbortController();

  /**
   * Delivers the endpoint's next changes in order, up to `budget`, reading them a page at a
   * time; successes are recorded (cursor moved) once per page, a failure ends the run after
   * recording what succeeded before it. Returns how many were delivered and whether to go on.
   *
   * Before every send the run reads its lease (`leaseState`, a primary-key read, small beside an
   * HTTP request): a replay revokes it (lease.ts, rewindEndpoint) and the run stops there, so it
   * sends nothing more from the old cursor; the revoked lease keeps every other run out until this
   * one releases it, so its attempt in flight stays the only one. A lease with less than an
   * attempt's time bound (plus slack) left is renewed first: an attempt, DNS lookup included, ends
   * within `timeoutMs` (deliver.ts), so it never outlives the lease.
   */
  const deliverRun = async (endpoint: EndpointRecord, token: string, budget: number): Promise<{ delivered: number; more: boolean }> => {
    const page = await readChanges(pool, endpoint.tenantId, endpoint.cursor, Math.min(budget, 100), endpoint.eventTypes, { trusted: true });
    if (page.changes.length === 0) return { delivered: 0, more: false };
    const secret = secrets.open(endpoint.secretSealed);
    const succeeded: Array<{ position: ChangeRecord['position']; type: string; statusCode: number; at: Date }> = [];
    const flush = async () => {
      const kept = await recordDelivered(pool, endpoint.tenantId, endpoint.id, token, succeeded, leaseMs);
      const last = succeeded.at(-1);
      if (kept && last) Object.assign(endpoint, { cursor: last.position, failedAttempts: 0, nextAttemptAt: null });
      succeeded.length = 0;
      return kept;
    };
    let sent = 0;
    for (const change of page.changes) {
      // Closing: record what succeeded and let go (the lease is released; the rest is delivered
      // by the next one to take it, this process after a restart or another worker).
      if (stop.signal.aborted) break;
      const lease = await leaseState(pool, endpoint.tenantId, endpoint.id, token);
      // Revoked by a replay, or lost: what succeeded cannot be recorded any more (the token
      // matches nothing); whoever takes the endpoint next starts from its cursor.
      if (!lease.ours) return { delivered: sent, more: false };
      // The lease must outlive the next attempt: record what succeeded so far, which renews it.
      if (lease.leftMs < timeoutMs + LEASE_SLACK_MS && !(await flush())) return { delivered: sent, more: false };
      sent++;
      const id = encodeCursor(change.position);
      const outcome = await sendWebhook(endpoint.url, secret, { id, type: change.type, timestamp: change.occurredAt, data: toChange(change) }, {
        policy: targets,
        timeoutMs,
      });
      if (outcome.kind === 'delivered') {
        succeeded.push({ position: change.position, type: change.type, statusCode: outcome.status, at: new Date() });
        continue;
      }
      if (!(await flush())) return { delivered: sent - 1, more: false };
      const base = { change: { position: change.position, type: change.type }, statusCode: outcome.status };
      if (outcome.kind === 'gone') {
        await recordAttempt(pool, endpoint.tenantId, endpoint.id, token, { ...base, error: 'HTTP 410', outcome: { kind: 'disable', reason: 'The receiver answered 410 Gone' } });
        logger?.warn({ endpointId: endpoint.id }, 'webhook endpoint disabled: 410 Gone');
        return { delivered: sent - 1, more: false };
      }
      const failedAttempts = endpoint.failedAttempts + 1;
      // The first failure of this change is now; a later one counts from when that was recorded.
      const sinceFirstFailure = failedAttempts === 1 || endpoint.retryingSince === null ? 0 : Math.max(0, Date.now() - Date.parse(endpoint.retryingSince));
      const delay = nextRetryDelay(retry, failedAttempts, random(), outcome.retryAfterMs, sinceFirstFailure);
      if (delay === null) {
        await recordAttempt(pool, endpoint.tenantId, endpoint.id, token, {
          ...base,
          error: outcome.error,
          outcome: { kind: 'disable', reason: `Every retry failed (last: ${outcome.error}); replay to resume` },
        });
        return { delivered: sent - 1, more: false };
      }
      const kept = await recordAttempt(pool, endpoint.tenantId, endpoint.id, token, { ...base, error: outcome.error, outcome: { kind: 'retry', failedAttempts, delayMs: delay } });
      if (kept) {
        const jobId = `retry-${endpoint.id}-${failedAttempts}-${change.position.commit}-${change.position.prepare}`;
        await triggers.add({ endpointId: endpoint.id, tenantId: endpoint.tenantId }, { delayMs: delay, jobId }).catch((error: unknown) =>
          logger?.warn({ err: error, endpointId: endpoint.id }, 'could not schedule a webhook retry; the sweep will'),
        );
      }
      return { delivered: sent - 1, more: false };
    }
    const kept = await flush();
    return { delivered: sent, more: kept && !stop.signal.aborted };
  };

  const drain = async (job: DrainJob) => {
    const token = randomUUID();
    const endpoint = await acquireLease(pool, job.tenantId, job.endpointId, token, leaseMs);
    if (!endpoint) return; // someone else is delivering to it, or it is gone/disabled
    let made = 0;
    try {
      for (;;) {
        const run = await deliverRun(endpoint, token, batchPerJob - made);
        made += run.delivered;
        if (!run.more || made >= batchPerJob) break;
      }
    } finally {
      await releaseLease(pool, job.tenantId, job.endpointId, token);
    }
    // Closes the gap between our last look and the release: work that is due now (after a
    // replay's hand-off, the changes from its cursor) gets a job.
    if ((await dueEndpoints(pool, 1, job.endpointId)).length > 0) await triggers.add(job);
  };

  const triggerOptions = { concurrency: options.concurrency ?? 16, ...(logger && { logger }) };
  const triggers: DrainTriggers = options.redisUrl
    ? await bullmqTriggers(drain, { ...triggerOptions, redisUrl: options.redisUrl, prefix, queueName: WEBHOOK_QUEUE })
    : inProcessTriggers(drain, triggerOptions);

  let sweeping: Promise<void> | undefined;
  let again = false;
  const sweepOnce = async () => {
    const due = await dueEndpoints(pool, 1_000);
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

  // The delivery log's retention: without it the log grows by a row per change per endpoint.
  const retentionMs = options.deliveryRetentionMs ?? DEFAULT_DELIVERY_RETENTION_MS;
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
