/**
 * When to try a failed delivery again (SPEC §7): after ≈ 5 s, 5 min, 30 min, 2 h, 5 h, 10 h,
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
};

export const DEFAULT_RETRY_POLICY: RetryPolicy = { scheduleMs: DEFAULT_RETRY_SCHEDULE_MS, jitter: 0.2, maxRetryAfterMs: 24 * 3_600_000 };

/**
 * The delay before the next attempt after `failedAttempts` failures (≥ 1), or null when the
 * schedule is exhausted. A receiver's Retry-After replaces the scheduled delay when longer
 * (it asked us to wait) and is never shortened by jitter.
 */
export function nextRetryDelay(policy: RetryPolicy, failedAttempts: number, random: number, retryAfterMs?: number): number | null {
  const base = policy.scheduleMs[failedAttempts - 1];
  if (base === undefined) return null;
  const jittered = Math.round(base * (1 + policy.jitter * (2 * random - 1)));
  if (retryAfterMs === undefined) return Math.max(0, jittered);
  return Math.max(jittered, Math.min(retryAfterMs, policy.maxRetryAfterMs));
}

/** RFC 9110 Retry-After: delay-seconds or an HTTP-date; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | undefined, now: number): number | undefined {
  if (value === undefined) return undefined;
  const trimmed = value.trim();
  if (/^\d{1,10}$/.test(trimmed)) return Number(trimmed) * 1000;
  const at = Date.parse(trimmed);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}
