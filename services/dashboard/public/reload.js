// @ts-check
/* When the KPI page reloads itself. Every reload is 8 calls drawn from the tenant's rate limit,
 * shared by all its users, so a page left open must not spend it for ever: a background reload
 * goes out only while someone uses the page and the tenant's bucket has tokens to spare. Pure
 * functions (no DOM), so the rules are unit-tested apart from the page. */
/* global URLSearchParams */

/** Seconds between background reloads unless `?refresh=<seconds>` says otherwise. */
export const DEFAULT_REFRESH_S = 60;
/** The shortest period `?refresh=` may ask for. */
export const MIN_REFRESH_S = 5;
/** Background reloads stop after this long without a pointer, key, wheel or focus event; the next one resumes them. */
export const IDLE_STOP_MS = 15 * 60_000;
/** A background reload waits until the bucket holds at least this share of its burst. */
export const MIN_SHARE_OF_BURST = 0.5;

/**
 * The reload period in ms from the page's query string.
 * @param {string} search `window.location.search`
 */
export function refreshPeriodMs(search) {
  const seconds = Number(new URLSearchParams(search).get('refresh'));
  return (Number.isFinite(seconds) && seconds >= MIN_REFRESH_S ? seconds : DEFAULT_REFRESH_S) * 1000;
}

/**
 * The tenant's bucket as one answer left it: whole tokens left (`RateLimit-Remaining`), the burst
 * and how many tokens flow back a second (`RateLimit-Policy: "burst";q=<burst>;w=<seconds to fill>`).
 * @typedef {{ remaining: number, burst: number, perSecond: number, at: number }} Budget
 */

/**
 * What an answer's headers say about the bucket, or null when they say nothing (a route without
 * the limit, or a limiter failing open).
 * @param {{ get(name: string): string | null }} headers
 * @param {number} at epoch ms of the answer
 * @returns {Budget | null}
 */
export function budgetOf(headers, at) {
  const remaining = headers.get('ratelimit-remaining');
  const policy = headers.get('ratelimit-policy') ?? '';
  const q = /;\s*q=(\d+)/.exec(policy);
  const w = /;\s*w=(\d+)/.exec(policy);
  const burst = q ? Number(q[1]) : Number(headers.get('ratelimit-limit'));
  if (remaining === null || !/^\d+$/.test(remaining.trim()) || !(burst > 0)) return null;
  const perSecond = q && w && Number(w[1]) > 0 ? burst / Number(w[1]) : 0;
  return { remaining: Number(remaining), burst, perSecond, at };
}

/**
 * Tokens the bucket should hold at `now`: what the answer left plus what has flowed back since,
 * at most the burst. Other users of the tenant may have spent some meanwhile; their spending
 * shows in the next answer.
 * @param {Budget} budget
 * @param {number} now
 */
export function tokensAt(budget, now) {
  return Math.min(budget.burst, budget.remaining + (Math.max(0, now - budget.at) / 1000) * budget.perSecond);
}

/**
 * The budget once a new answer has arrived: its figures, unless the budget before it, refilled
 * since, leaves fewer tokens. A range's seven calls go out together and are answered in any
 * order, so the last answer to arrive is not always the last one the limiter counted.
 * @param {Budget | null} previous
 * @param {Budget | null} fresh
 * @returns {Budget | null}
 */
export function nextBudget(previous, fresh) {
  if (!fresh) return previous;
  if (!previous || previous.perSecond === 0 || previous.burst !== fresh.burst) return fresh;
  return { ...fresh, remaining: Math.min(fresh.remaining, tokensAt(previous, fresh.at)) };
}

/**
 * Whether a background reload may go out: `idle` (nobody has used the page for IDLE_STOP_MS:
 * stop until someone does), `wait` (fewer than half the burst left: try again next period), or
 * `go`. Without a budget (no answer has carried one yet) it goes.
 * @param {{ now: number, lastInteraction: number, budget: Budget | null }} state
 * @returns {'idle' | 'wait' | 'go'}
 */
export function backgroundReload({ now, lastInteraction, budget }) {
  if (now - lastInteraction >= IDLE_STOP_MS) return 'idle';
  if (budget && tokensAt(budget, now) < budget.burst * MIN_SHARE_OF_BURST) return 'wait';
  return 'go';
}
