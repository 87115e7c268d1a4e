import type { DatabasePool } from '../../shared/db/pool.ts';
import type { Logger } from '../../shared/logger.ts';
import { scanChanges, type ChangeRecord } from '../../projections/changes/queries.ts';
import type { GlobalPosition } from '../../shared/event-store/port.ts';
import { errorSite } from '../../shared/errorSite.ts';
import { storableText } from '../../shared/validation.ts';
import { encodeCursor } from '../changes/cursor.ts';
import { toChange } from '../changes/change.ts';
import { resolveWebhookTarget, sendToTarget, type DeliveryOutcome, type WebhookTarget } from './deliver.ts';
import { ERROR_TEXT_MAX, recordAttempt, recordDelivered } from './deliveryLog.ts';
import { deliveredTypes, resealSecret, type EndpointRecord } from './endpoints.ts';
import { readBeforeSend } from './beforeSend.ts';
import { nextRetryDelay, type RetryPolicy } from './schedule.ts';
import { SecretUnavailableError, type SecretBox } from './secrets.ts';
import type { TargetPolicy } from './targets.ts';
import type { DrainTriggers } from './triggers.ts';

/** What a lease must have left beyond an attempt's time bound when the attempt starts (recording it, clock drift). */
const LEASE_SLACK_MS = 5_000;
/** An attempt's two steps, each within `timeoutMs`: the host's look-up, then the request. */
export const ATTEMPT_STEPS = 2;
/**
 * What the delivery log says of an attempt that failed on our side with an unexpected error: the
 * tenant reads the log, and the error's own text may quote anything, personal data included.
 */
export const INTERNAL_FAILURE = 'the service could not make this attempt (an internal error, logged)';

export type DeliveryRunDeps = {
  readonly pool: DatabasePool;
  readonly secrets: SecretBox;
  readonly targets: TargetPolicy;
  readonly retry: RetryPolicy;
  /** Per attempt. */
  readonly timeoutMs: number;
  readonly leaseMs: number;
  readonly random: () => number;
  readonly logger?: Pick<Logger, 'warn' | 'error'>;
  /** Aborted when the dispatcher closes: the run stops after the delivery in flight. */
  readonly stop: AbortSignal;
  /** Where a retry is scheduled (a delayed drain of the endpoint). */
  readonly triggers: Pick<DrainTriggers, 'add'>;
  /** How many changes after the cursor a run looks at (SCAN_WINDOW). */
  readonly scanWindow: number;
  /** The delivery log's retention: an entry attempted again drops its attempts older than this. */
  readonly retentionMs: number;
};

/**
 * Delivers the endpoint's next changes in order, up to `budget` and starting none after
 * `until` (epoch ms), reading them a page at a time (those of its types among the next
 * `scanWindow` changes); successes are recorded (cursor moved) once per page, a failure ends the
 * run after recording what succeeded before it. Returns how many were delivered and whether to go on.
 *
 * Before every send the run reads its lease and the change as the feed holds it then
 * (`readBeforeSend`, one statement, small beside an HTTP request; the body is built from that
 * read, so an erasure since the page was read is honoured). A replay revokes the lease (lease.ts,
 * rewindEndpoint) and the run stops there, so it sends nothing more from the old cursor; the
 * revoked lease keeps every other run out until this one releases it, so its attempt in flight
 * stays the only one. The target is resolved before that read (within `timeoutMs`), so only the
 * request stands between the read and the send. A lease with less left than that request and the
 * next change's look-up (each within `timeoutMs`, deliver.ts), plus slack, is renewed first, so
 * neither outlives the lease before the next read.
 */
export function createDeliveryRun(deps: DeliveryRunDeps) {
  const { pool, secrets, targets, retry, timeoutMs, leaseMs, random, logger, stop, triggers, scanWindow, retentionMs } = deps;
  const attemptsSince = () => new Date(Date.now() - retentionMs);
  /** The plain secret; one sealed under an old key is sealed again under the current one, so old keys can be retired. */
  const openSecret = async (endpoint: EndpointRecord): Promise<string | { readonly error: string }> => {
    let plain: string;
    try {
      plain = secrets.open(endpoint.secretSealed);
    } catch (error) {
      if (!(error instanceof SecretUnavailableError)) throw error;
      logger?.error({ endpointId: endpoint.id, tenantId: endpoint.tenantId, err: error }, 'webhook signing secret cannot be opened');
      return { error: error.message };
    }
    if (secrets.isStale(endpoint.secretSealed)) {
      const resealed = secrets.seal(plain);
      if (await resealSecret(pool, endpoint.tenantId, endpoint.id, endpoint.secretSealed, resealed))
        Object.assign(endpoint, { secretSealed: resealed });
    }
    return plain;
  };
  /**
   * A run's attempts at the endpoint's changes: the secret (opened at the first), the body, the
   * request. A secret that cannot be opened is a failed attempt like any other (logged, retried
   * on the schedule, then the endpoint disabled), and so is any other error on our side: thrown
   * out of the run it would be neither recorded nor backed off, and the sweep would start the
   * run again every few seconds, forever.
   */
  const attempts = (endpoint: EndpointRecord) => {
    let secret: Promise<string | { readonly error: string }> | undefined;
    const onOurSide = (error: unknown): DeliveryOutcome => {
      logger?.error(
        { endpointId: endpoint.id, tenantId: endpoint.tenantId, error: errorSite(error) },
        'webhook delivery attempt failed on our side',
      );
      return { kind: 'failed', status: null, error: INTERNAL_FAILURE };
    };
    const options = { policy: targets, timeoutMs };
    return {
      /** Where the next attempt goes (resolved and checked now), or that attempt's failure. */
      resolve: (): Promise<WebhookTarget | DeliveryOutcome> => resolveWebhookTarget(endpoint.url, options).catch(onOurSide),
      /** The attempt: `change` signed and sent to `target`, unless resolving it failed. */
      send: async (change: ChangeRecord, target: WebhookTarget | DeliveryOutcome): Promise<DeliveryOutcome> => {
        if ('kind' in target) return target;
        try {
          const opened = await (secret ??= openSecret(endpoint));
          if (typeof opened !== 'string') return { kind: 'failed', status: null, error: opened.error };
          const message = { id: encodeCursor(change.position), type: change.type, timestamp: change.occurredAt, data: toChange(change) };
          return await sendToTarget(target, opened, message, options);
        } catch (error) {
          return onOurSide(error);
        }
      },
    };
  };
  return async (endpoint: EndpointRecord, token: string, budget: number, until: number): Promise<{ delivered: number; more: boolean }> => {
    const page = await scanChanges(
      pool,
      endpoint.tenantId,
      endpoint.cursor,
      deliveredTypes(endpoint.eventTypes),
      Math.min(budget, 100),
      scanWindow,
    );
    const succeeded: Array<{ position: ChangeRecord['position']; type: string; statusCode: number; at: Date; durationMs: number }> = [];
    /** Records what succeeded (renewing the lease) and moves the cursor past it, or to `moveTo`, past changes of other types. */
    const flush = async (moveTo?: GlobalPosition) => {
      const kept = await recordDelivered(pool, endpoint.tenantId, endpoint.id, token, succeeded, leaseMs, moveTo, attemptsSince());
      const last = succeeded.at(-1);
      if (kept && last) Object.assign(endpoint, { cursor: last.position });
      if (kept && moveTo) Object.assign(endpoint, { cursor: moveTo });
      // As recordDelivered does: a cursor that moved leaves any retry state behind.
      if (kept && (last || moveTo)) Object.assign(endpoint, { failedAttempts: 0, nextAttemptAt: null, retryingSince: null });
      succeeded.length = 0;
      return kept;
    };
    // None of its types among the changes looked at: the cursor moves past them, so neither the
    // sweep nor the next run reads them again.
    if (page.changes.length === 0) {
      if (!page.scannedTo) return { delivered: 0, more: false };
      return { delivered: 0, more: (await flush(page.scannedTo)) && !stop.aborted };
    }
    const attempt = attempts(endpoint);
    let sent = 0;
    let whole = true;
    for (const change of page.changes) {
      // Closing: record what succeeded and let go (the lease is released; the rest is delivered
      // by the next one to take it, this process after a restart or another worker). Or its
      // time is up: the job yields its slot (the rest of the page is read again next time).
      if (stop.aborted || Date.now() >= until) {
        whole = false;
        break;
      }
      // The target first: a resolver that takes seconds must not stand between the read of the
      // change below and its request, or an erasure committed meanwhile would still go out.
      const at = new Date();
      const target = await attempt.resolve();
      if (stop.aborted || Date.now() >= until) {
        whole = false;
        break;
      }
      const current = await readBeforeSend(pool, endpoint.tenantId, endpoint.id, token, change);
      // Revoked by a replay, or lost: what succeeded cannot be recorded any more (the token
      // matches nothing); whoever takes the endpoint next starts from its cursor.
      if (!current.ours) return { delivered: sent, more: false };
      // No longer in the feed (a rebuild parked it): its copy in the page is not sent; what
      // succeeded is recorded and the next run reads the feed as it is now.
      if (!current.employee) {
        whole = false;
        break;
      }
      // The lease must outlive this request and the next change's look-up (each bounded by
      // `timeoutMs`), to the next read: record what succeeded so far, which renews it.
      if (current.leftMs < ATTEMPT_STEPS * timeoutMs + LEASE_SLACK_MS && !(await flush())) return { delivered: sent, more: false };
      sent++;
      const outcome = await attempt.send({ ...change, employee: current.employee }, target);
      const durationMs = Date.now() - at.getTime();
      if (outcome.kind === 'delivered') {
        succeeded.push({ position: change.position, type: change.type, statusCode: outcome.status, at, durationMs });
        continue;
      }
      if (!(await flush())) return { delivered: sent - 1, more: false };
      const base = {
        change: { position: change.position, type: change.type },
        statusCode: outcome.status,
        at,
        durationMs,
        attemptsSince: attemptsSince(),
      };
      if (outcome.kind === 'gone') {
        await recordAttempt(pool, endpoint.tenantId, endpoint.id, token, {
          ...base,
          error: 'HTTP 410',
          outcome: { kind: 'disable', reason: 'The receiver answered 410 Gone' },
        });
        logger?.warn({ endpointId: endpoint.id }, 'webhook endpoint disabled: 410 Gone');
        return { delivered: sent - 1, more: false };
      }
      const failedAttempts = endpoint.failedAttempts + 1;
      // The first failure of this change is now; a later one counts from when that was recorded.
      const sinceFirstFailure =
        failedAttempts === 1 || endpoint.retryingSince === null ? 0 : Math.max(0, Date.now() - Date.parse(endpoint.retryingSince));
      const delay = nextRetryDelay(retry, failedAttempts, random(), outcome.retryAfterMs, sinceFirstFailure);
      if (delay === null) {
        const last = storableText(outcome.error, ERROR_TEXT_MAX);
        await recordAttempt(pool, endpoint.tenantId, endpoint.id, token, {
          ...base,
          error: outcome.error,
          outcome: { kind: 'disable', reason: `Every retry failed (last: ${last}); replay to resume` },
        });
        return { delivered: sent - 1, more: false };
      }
      const kept = await recordAttempt(pool, endpoint.tenantId, endpoint.id, token, {
        ...base,
        error: outcome.error,
        outcome: { kind: 'retry', failedAttempts, delayMs: delay },
      });
      if (kept) {
        const jobId = `retry-${endpoint.id}-${failedAttempts}-${change.position.commit}-${change.position.prepare}`;
        await triggers
          .add({ endpointId: endpoint.id, tenantId: endpoint.tenantId }, { delayMs: delay, jobId })
          .catch((error: unknown) =>
            logger?.warn({ err: error, endpointId: endpoint.id }, 'could not schedule a webhook retry; the sweep will'),
          );
      }
      return { delivered: sent - 1, more: false };
    }
    // Every change of its types among those looked at went out: past the others too.
    const kept = await flush(whole ? (page.scannedTo ?? undefined) : undefined);
    return { delivered: sent, more: kept && !stop.aborted };
  };
}
