// @ts-check
/* The KPI page's side of the API: the session (tokens in sessionStorage, this tab only), one call
 * with its error, and the calls through the tenant's rate limit. A 401 is answered by one refresh
 * (POST /v1/auth/refresh) then a retry; only a 401 from the refresh itself ends the session.
 *
 * Every API call draws on the tenant's rate limit (Starter: burst 10, 1 a second), and a range
 * change asks for 7 series at once. So the page is a polite client of its own API: a 429 is
 * retried after its Retry-After (at most MAX_RETRIES times, never waiting more than MAX_WAIT_S);
 * once the API has said "no token left" (a 429, or RateLimit-Remaining: 0) calls go out one at a
 * time, each after the announced wait, instead of as a burst that is refused again. */
/* global sessionStorage, fetch, setTimeout */
import { budgetOf, nextBudget } from './reload.js';

/** Refusals (429, or 503 with Retry-After: the limiter is down and fails closed) one call, or one refresh, waits out before it reports the error. */
export const MAX_RETRIES = 4;
/** The longest single wait, in seconds: a longer Retry-After is reported, not waited for. */
export const MAX_WAIT_S = 30;
/**
 * The signed-in user, in this tab: the tenant and email first, the tokens once signed in.
 * @typedef {{ tenant: string, email: string, accessToken?: string, refreshToken?: string }} Session
 */
export const session = {
  /** @returns {Session | null} */
  get: () => JSON.parse(sessionStorage.getItem('kpi-session') || 'null'),
  /** @param {Session} value */
  set: (value) => sessionStorage.setItem('kpi-session', JSON.stringify(value)),
  clear: () => sessionStorage.removeItem('kpi-session'),
};

export class HttpError extends Error {
  /**
   * @param {number} status
   * @param {{ detail?: string, title?: string } | null} problem the RFC 9457 body, when there is one
   * @param {number | null} retryAfter
   */
  constructor(status, problem, retryAfter = null) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status;
    /** Seconds from Retry-After, or null. */
    this.retryAfter = retryAfter;
  }
}

/** @param {unknown} error */
export const isAbort = (error) => error instanceof Error && error.name === 'AbortError';

/**
 * Retry-After / RateLimit-Reset in seconds: delta-seconds (what this API sends) or an HTTP date; null when absent.
 * @param {string | null} value
 */
function seconds(value) {
  if (value === null || value.trim() === '') return null;
  if (/^\d+$/.test(value.trim())) return Number(value);
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, (at - Date.now()) / 1000);
}

/**
 * `promise`, or a rejection with the abort reason as soon as `signal` aborts.
 * @template T
 * @param {Promise<T>} promise
 * @param {AbortSignal} [signal]
 * @returns {Promise<T>}
 */
function abortable(promise, signal) {
  if (!signal) return promise;
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** @param {number} ms @param {AbortSignal} [signal] */
const sleep = (ms, signal) => abortable(new Promise((resolve) => setTimeout(resolve, Math.max(0, ms))), signal);

/**
 * One call to the API: its JSON answer, or an HttpError for a status that is not 2xx.
 * @param {string} method
 * @param {string} path
 * @param {{ body?: unknown, auth?: boolean, signal?: AbortSignal, observe?: (response: Response) => void }} [options]
 * @returns {Promise<any>} the answer's JSON, shaped as the OpenAPI document says
 */
export async function send(method, path, { body, auth = true, signal, observe } = {}) {
  const s = session.get();
  /** @type {Record<string, string>} */
  const headers = { accept: 'application/json', 'x-tenant': s ? s.tenant : '' };
  if (body) headers['content-type'] = 'application/json';
  if (auth && s) headers.authorization = `Bearer ${s.accessToken}`;
  const response = await fetch(path, { method, headers, body: body ? JSON.stringify(body) : undefined, signal });
  if (observe) observe(response);
  const data = response.status === 204 ? null : await response.json().catch(() => null);
  if (!response.ok) throw new HttpError(response.status, data, seconds(response.headers.get('retry-after')));
  return data;
}

/* The tenant's rate limit as this page sees it (docs/rate-limits.md). All users of a tenant share
 * one bucket, so the page cannot know how many tokens are left; it only listens to what each
 * answer says. */
export const gate = {
  /** Epoch ms: no call before this (from a Retry-After, or the RateLimit-Reset of a last token). */
  notBefore: 0,
  /** Whether a call was refused (429) since the queue last emptied: the status line says "retrying". */
  refused: false,
  /** Calls waiting for their turn or in flight through the queue. */
  queued: 0,
  /** While limited, each call waits for the one before it to be answered, then for notBefore. */
  tail: Promise.resolve(),
  /** The bucket as the latest answer that described it left it (reload.js), or null before any. */
  /** @type {import('./reload.js').Budget | null} */
  budget: null,
};

/**
 * What the page does when the API layer has news: repaint the status line when the gate changes,
 * sign out when the session cannot be refreshed. The page sets them (`onApiEvents`) at start.
 */
const hooks = {
  gateChanged: () => {},
  /** @param {string} _message */
  expired: (_message) => {},
};

/** @param {Partial<typeof hooks>} handlers */
export function onApiEvents(handlers) {
  Object.assign(hooks, handlers);
}

/** Whether calls wait on the rate limit now (queued, or before the announced time). */
export const limited = () => gate.queued > 0 || Date.now() < gate.notBefore;

/**
 * Reads an API answer's rate-limit fields into the gate. A background call's refusal is not
 * announced as "retrying": it is not retried.
 * @param {Response} response
 * @param {boolean} background
 */
function noteLimit(response, background) {
  const retryAfter = response.status === 429 || response.status === 503 ? seconds(response.headers.get('retry-after')) : null;
  const lastToken = response.headers.get('ratelimit-remaining') === '0';
  const wait = retryAfter !== null ? retryAfter : lastToken ? seconds(response.headers.get('ratelimit-reset')) : null;
  gate.budget = nextBudget(gate.budget, budgetOf(response.headers, Date.now()));
  if (retryAfter !== null && !background) gate.refused = true;
  if (wait !== null) gate.notBefore = Math.max(gate.notBefore, Date.now() + Math.min(wait, MAX_WAIT_S) * 1000);
  hooks.gateChanged();
}

/** Runs `call` now or, while the tenant is limited, after the calls queued before it and the announced wait. */
/**
 * @template T
 * @param {() => Promise<T>} call
 * @param {AbortSignal} [signal]
 * @returns {Promise<T>}
 */
async function throttled(call, signal) {
  if (!limited()) return call();
  const previous = gate.tail;
  /** @type {() => void} */
  let release = () => {};
  gate.tail = new Promise((resolve) => (release = resolve));
  gate.queued += 1;
  hooks.gateChanged();
  try {
    await abortable(previous, signal);
    await sleep(Math.min(gate.notBefore - Date.now(), MAX_WAIT_S * 1000), signal);
    return await call();
  } finally {
    gate.queued -= 1;
    if (gate.queued === 0) gate.refused = false;
    release();
    hooks.gateChanged();
  }
}

/** @type {Promise<boolean> | null} */
let refreshing = null;

/** Signs out: the session cannot be refreshed. */
const expired = () => {
  hooks.expired('Your session has expired. Please sign in again.');
  return false;
};

/**
 * Seconds to wait before a failed refresh is tried again, or null when it must not be: no answer
 * (a network error) and 429/503 are transient, anything else is reported.
 * @param {unknown} error
 * @param {number} attempt
 */
function refreshWait(error, attempt) {
  if (!(error instanceof HttpError)) return 2 ** attempt;
  if (error.status !== 429 && error.status !== 503) return null;
  return error.retryAfter ?? 2 ** attempt;
}

/**
 * One POST /v1/auth/refresh for every call that met the expired token: true once refreshed, false
 * (and the sign-in form) when the gateway answers 401 or the session is gone. A 429, a 503 (a
 * gateway draining during a deploy) or no answer at all says nothing about the session: it is
 * retried like a refused call (Retry-After, else 1, 2, 4, 8 s), and if it persists the error is
 * thrown with the session kept, so the next call refreshes again.
 */
function refreshSession() {
  if (!refreshing) {
    refreshing = (async () => {
      for (let attempt = 0; ; attempt++) {
        const s = session.get();
        if (!s) return expired();
        try {
          const tokens = await send('POST', '/v1/auth/refresh', { body: { refreshToken: s.refreshToken }, auth: false });
          session.set({ ...s, accessToken: tokens.accessToken, refreshToken: tokens.refreshToken });
          return true;
        } catch (error) {
          if (error instanceof HttpError && error.status === 401) return expired();
          const wait = refreshWait(error, attempt);
          if (wait === null || wait > MAX_WAIT_S || attempt >= MAX_RETRIES) throw error;
          await sleep(wait * 1000);
        }
      }
    })().finally(() => {
      refreshing = null;
    });
  }
  return refreshing;
}

/**
 * GET through the gate. A refusal with Retry-After (429; 503 when the limiter is down) is retried
 * after it, at most MAX_RETRIES times and only when it is at most MAX_WAIT_S; a 401 gets one token
 * refresh, then the call again, and sign-in when the refresh is refused with a 401 too. `signal`
 * aborts the call wherever it is, waits included. A `background` call (the page reloading itself)
 * never waits: while calls wait on the rate limit it fails at once, and a refusal is not retried,
 * so it neither queues behind nor spends the tokens of what a user asked for.
 * @param {string} path
 * @param {AbortSignal} [signal]
 * @param {{ background?: boolean }} [options]
 * @returns {Promise<any>} the answer's JSON, shaped as the OpenAPI document says
 */
export async function api(path, signal, { background = false } = {}) {
  let refreshed = false;
  let retries = 0;
  /** @param {Response} response */
  const observe = (response) => noteLimit(response, background);
  for (;;) {
    try {
      if (!background) return await throttled(() => send('GET', path, { signal, observe }), signal);
      if (limited()) throw new HttpError(429, { detail: 'Put off: calls wait on the rate limit' });
      return await send('GET', path, { signal, observe });
    } catch (error) {
      if (!(error instanceof HttpError)) throw error;
      if (error.status === 401 && !refreshed) {
        refreshed = true;
        if (!(await refreshSession())) throw error;
      } else if (
        !background &&
        (error.status === 429 || error.status === 503) &&
        error.retryAfter !== null &&
        error.retryAfter <= MAX_WAIT_S &&
        retries < MAX_RETRIES
      ) {
        retries += 1;
      } else {
        throw error;
      }
    }
  }
}
