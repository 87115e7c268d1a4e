import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { nextRetryDelay, parseRetryAfter, DEFAULT_RETRY_POLICY } from '../../../services/webhooks/schedule.ts';

describe('the retry schedule', () => {
  it('is ≈ 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, then daily, and ends within 3 days', () => {
    const delays = Array.from({ length: 10 }, (_, i) => nextRetryDelay({ ...DEFAULT_RETRY_POLICY, jitter: 0 }, i + 1, 0.5));
    expect(delays).toEqual([5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 86_400_000, 86_400_000, null, null]);
    const total = delays.reduce<number>((sum, d) => sum + (d ?? 0), 0);
    expect(total).toBeLessThanOrEqual(3 * 86_400_000);
  });

  it('jitters within ±20 % and never shortens a Retry-After', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 8 }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        fc.option(fc.integer({ min: 0, max: 10 * 86_400_000 })),
        (n, r, retryAfter) => {
          const base = DEFAULT_RETRY_POLICY.scheduleMs[n - 1] ?? 0;
          const delay = nextRetryDelay(DEFAULT_RETRY_POLICY, n, r, retryAfter ?? undefined) ?? -1;
          expect(delay).toBeGreaterThanOrEqual(Math.floor(base * 0.8));
          if (retryAfter === null) expect(delay).toBeLessThanOrEqual(Math.ceil(base * 1.2));
          else expect(delay).toBeGreaterThanOrEqual(Math.min(retryAfter, DEFAULT_RETRY_POLICY.maxRetryAfterMs));
        },
      ),
    );
  });

  it('never schedules a retry past 3 days after the first failure, whatever jitter or Retry-After ask', () => {
    const window = DEFAULT_RETRY_POLICY.windowMs ?? 0;
    expect(window).toBe(3 * 86_400_000);
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.double({ min: 0, max: 1, noNaN: true }), fc.option(fc.integer({ min: 0, max: 2 * 86_400_000 }))), {
          minLength: 8,
          maxLength: 8,
        }),
        (draws) => {
          let elapsed = 0;
          for (const [n, [r, retryAfter]] of draws.entries()) {
            const delay = nextRetryDelay(DEFAULT_RETRY_POLICY, n + 1, r, retryAfter ?? undefined, elapsed);
            if (delay === null) return;
            elapsed += delay;
            expect(elapsed).toBeLessThanOrEqual(window);
            // Never sooner than the receiver asked.
            if (retryAfter !== null) expect(delay).toBeGreaterThanOrEqual(Math.min(retryAfter, DEFAULT_RETRY_POLICY.maxRetryAfterMs));
          }
        },
      ),
    );
    // The last scheduled retry is moved to the window's end; a Retry-After beyond it ends the retries.
    expect(nextRetryDelay(DEFAULT_RETRY_POLICY, 8, 1, undefined, window - 3_600_000)).toBe(3_600_000);
    expect(nextRetryDelay(DEFAULT_RETRY_POLICY, 8, 0.5, 7_200_000, window - 3_600_000)).toBeNull();
    expect(nextRetryDelay(DEFAULT_RETRY_POLICY, 3, 0.5, undefined, window)).toBeNull();
  });

  it('reads Retry-After as seconds or an HTTP date', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(parseRetryAfter('120', now)).toBe(120_000);
    expect(parseRetryAfter('Thu, 01 Jan 2026 00:01:00 GMT', now)).toBe(60_000);
    expect(parseRetryAfter('soon', now)).toBeUndefined();
    expect(parseRetryAfter(undefined, now)).toBeUndefined();
  });
});
