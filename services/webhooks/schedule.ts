/**
 * When to try a failed delivery again: after ≈ 5 s, 5 min, 30 min, 2 h, 5 h, 10 h,
 * then daily, for at most 3 days after the first attempt. Pure: the caller passes the random
 * draw and the clock, so the schedule is specified by tests.
 */
export const DEFAULT_RETRY_SCHEDULE_MS: readonly number[] = [
  5_000,
  5 * 60_000,
  30 * 60_000,
  2 * 3_600_000,
  5 * 3_600_000,
  10 * 3_600_000,
  24 * 3_600_000,
  24 * 3_600_000,
];

export type RetryPolicy = {
  /** Delay before retry n (n = 1 is the first retry). Its length bounds the number of retries. */
  readonly scheduleMs: readonly number[];
  /** Delays are spread by ± this share (0.2: ±20 %), so many endpoints failing at once do not retry in lock step. */
  readonly jitter: number;
  /** A receiver's Retry-After is honoured up to this long. */
  readonly maxRetryAfterMs: number;
  /**
   * No retry is scheduled later than this long after the change's first failed attempt (retries
   * last up to 3 days), whatever jitter or a receiver's Retry-After would make of the schedule.
   * Absent: the schedule's length alone bounds the retries.
   */
  readonly windowMs?: number;
};

export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  scheduleMs: DEFAULT_RETRY_SCHEDULE_MS,
  jitter: 0.2,
  maxRetryAfterMs: 24 * 3_600_000,
  windowMs: 3 * 86_400_000,
};

/**
 * The delay before the next attempt after `failedAttempts` failures (≥ 1), `sinceFirstFailureMs`
 * after the change's first failed attempt, or null when the retries are exhausted. A receiver's
 * Retry-After replaces the scheduled delay when longer (it asked us to wait) and is never
 * shortened by jitter. Within the window: a scheduled delay that would end past it is shortened
 * to end at it (the last retry, at the window's end); a Retry-After that asks for longer than is
 * left ends the retries (retrying sooner than the receiver asked would not help it).
 */
export function nextRetryDelay(
  policy: RetryPolicy,
  failedAttempts: number,
  random: number,
  retryAfterMs?: number,
  sinceFirstFailureMs = 0,
): number | null {
  const base = policy.scheduleMs[failedAttempts - 1];
  if (base === undefined) return null;
  const jittered = Math.max(0, Math.round(base * (1 + policy.jitter * (2 * random - 1))));
  const asked = retryAfterMs === undefined ? 0 : Math.min(retryAfterMs, policy.maxRetryAfterMs);
  const delay = Math.max(jittered, asked);
  if (policy.windowMs === undefined) return delay;
  const left = policy.windowMs - sinceFirstFailureMs;
  if (left <= 0 || asked > left) return null;
  return Math.min(delay, left);
}

/** RFC 9110 Retry-After: delay-seconds or an HTTP-date; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | undefined, now: number): number | undefined {
  if (value === undefined) return undefined;
  const trimmed = value.trim();
  if (/^\d{1,10}$/.test(trimmed)) return Number(trimmed) * 1000;
  const at = Date.parse(trimmed);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}
