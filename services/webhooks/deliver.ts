import http from 'node:http';
import https from 'node:https';
import type { LookupFunction } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { parseRetryAfter } from './schedule.ts';
import { resolveTarget, TargetRefusedError, type ResolvedAddress, type TargetPolicy } from './targets.ts';

/** What a Standard Webhooks delivery carries: `id` is the change cursor, stable across retries. */
export type WebhookMessage = { readonly id: string; readonly type: string; readonly timestamp: string; readonly data: unknown };

export type DeliveryOutcome =
  | { readonly kind: 'delivered'; readonly status: number }
  | { readonly kind: 'gone'; readonly status: 410 }
  | { readonly kind: 'failed'; readonly status: number | null; readonly error: string; readonly retryAfterMs?: number };

export type SendOptions = { readonly policy: TargetPolicy; readonly timeoutMs: number; readonly now?: () => Date };

/**
 * One delivery attempt (Standard Webhooks): body `{type, timestamp, data}`, headers
 * `webhook-id`, `webhook-timestamp` (this attempt, seconds), `webhook-signature` (v1, HMAC-SHA256
 * of `id.timestamp.body`, signed by the `standardwebhooks` package). The target is resolved and
 * checked now, and the connection goes to the address that was checked (a custom `lookup`),
 * with the URL's host name kept for TLS (SNI, certificate) and the Host header.
 * Redirects are not followed (a redirect could point anywhere); they count as failures.
 * One bound for the whole attempt, DNS look-up included. The delivery run takes the two steps
 * apart (`resolveWebhookTarget`, then `sendToTarget`, each with its own bound) to read the change
 * between them.
 */
export async function sendWebhook(url: string, secret: string, message: WebhookMessage, options: SendOptions): Promise<DeliveryOutcome> {
  const deadline = AbortSignal.timeout(options.timeoutMs);
  const target = await resolveWebhookTarget(url, options, deadline);
  return 'kind' in target ? target : sendToTarget(target, secret, message, options, deadline);
}

/** Where an attempt sends: the endpoint's URL and the address it resolved to and passed the checks. */
export type WebhookTarget = { readonly url: URL; readonly address: ResolvedAddress };

/**
 * The first half of an attempt: the endpoint's URL resolved and checked now (targets.ts), within
 * `deadline` (by default `options.timeoutMs`), or the attempt's failure. A caller that reads what it
 * sends just before sending (the delivery run) resolves first, so a slow resolver does not stand
 * between that read and the request.
 */
export async function resolveWebhookTarget(
  url: string,
  options: SendOptions,
  deadline = AbortSignal.timeout(options.timeoutMs),
): Promise<WebhookTarget | DeliveryOutcome> {
  try {
    return await beforeDeadline(resolveTarget(url, options.policy), deadline);
  } catch (error) {
    if (error instanceof TargetRefusedError) return { kind: 'failed', status: null, error: `refused: ${error.message}` };
    if (deadline.aborted) return { kind: 'failed', status: null, error: `no answer within ${options.timeoutMs} ms (resolving the host)` };
    throw error;
  }
}

/** The second half of an attempt: the request to `target`, ended by `deadline` (by default `options.timeoutMs`) whatever its state. */
export function sendToTarget(
  target: WebhookTarget,
  secret: string,
  message: WebhookMessage,
  options: SendOptions,
  deadline = AbortSignal.timeout(options.timeoutMs),
): Promise<DeliveryOutcome> {
  const now = options.now?.() ?? new Date();
  const body = JSON.stringify({ type: message.type, timestamp: message.timestamp, data: message.data });
  const signature = new Webhook(secret).sign(message.id, now, body);
  const pinned = target.address;
  const lookup: LookupFunction = (_hostname, lookupOptions, callback) => {
    if (lookupOptions.all) callback(null, [{ address: pinned.address, family: pinned.family }]);
    else callback(null, pinned.address, pinned.family);
  };
  const transport = target.url.protocol === 'https:' ? https : http;
  const unanswered = `no answer within ${options.timeoutMs} ms`;
  return new Promise<DeliveryOutcome>((resolve) => {
    const settle = (outcome: DeliveryOutcome) => {
      deadline.removeEventListener('abort', onDeadline);
      resolve(outcome);
    };
    const request = transport.request(
      target.url,
      {
        method: 'POST',
        lookup,
        // Silence on the socket; `deadline` bounds the whole attempt, whatever is left of it.
        timeout: options.timeoutMs,
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          'user-agent': 'employee-analytics-webhooks/1',
          'webhook-id': message.id,
          'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
          'webhook-signature': signature,
        },
      },
      (response) => {
        const status = response.statusCode ?? 0;
        const retryAfter = response.headers['retry-after'];
        response.resume(); // the body is not used; drain it so the socket can be reused
        response.on('error', () => undefined);
        response.on('end', () => undefined);
        if (status >= 200 && status < 300) return settle({ kind: 'delivered', status });
        if (status === 410) return settle({ kind: 'gone', status: 410 });
        const retryAfterMs = parseRetryAfter(typeof retryAfter === 'string' ? retryAfter : undefined, now.getTime());
        settle({ kind: 'failed', status, error: `HTTP ${status}`, ...(retryAfterMs !== undefined && { retryAfterMs }) });
      },
    );
    // A 101 reaches neither the response callback nor 'error' (Node hands it to 'upgrade'
    // listeners only): without this the attempt would wait forever and hold the endpoint's lease
    // and a delivery slot with it.
    request.on('upgrade', (_response, socket) => {
      socket.destroy();
      settle({ kind: 'failed', status: 101, error: 'HTTP 101: the receiver switched protocols' });
    });
    request.on('timeout', () => request.destroy(new Error(unanswered)));
    request.on('error', (error) => settle({ kind: 'failed', status: null, error: hideAddress(error.message, target) }));
    // The bound of the whole attempt, whatever state the request is in (the socket timeout
    // above only covers silence): nothing a receiver does may keep an attempt past it.
    function onDeadline() {
      request.destroy();
      settle({ kind: 'failed', status: null, error: unanswered });
    }
    if (deadline.aborted) return onDeadline();
    deadline.addEventListener('abort', onDeadline, { once: true });
    request.end(body);
  });
}

/** `work`, or a rejection once `signal` aborts (a DNS lookup cannot be cancelled; its late answer is dropped). */
function beforeDeadline<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/**
 * A connection error names the address it dialled ("connect ECONNREFUSED 10.1.2.3:443"); the
 * tenant reads it in the delivery log, so it names the host the tenant registered instead (an
 * allow-listed internal name must not tell where it points).
 */
function hideAddress(message: string, target: { url: URL; address: { address: string } }): string {
  const host = target.url.hostname.replace(/^\[(.*)\]$/, '$1');
  if (host === target.address.address) return message;
  return message.split(target.address.address).join(target.url.hostname);
}
