import { describe, expect, it } from 'vitest';

/**
 * When the KPI page reloads itself (services/dashboard/public/reload.js): only while someone uses
 * the page, and only while the tenant's shared bucket has at least half its burst.
 */

/** The page's module as this test uses it: browser JavaScript, type-checked by its own tsconfig, so typed here by hand. */
type Budget = { remaining: number; burst: number; perSecond: number; at: number };
type ReloadRules = {
  DEFAULT_REFRESH_S: number;
  MIN_REFRESH_S: number;
  IDLE_STOP_MS: number;
  refreshPeriodMs(search: string): number;
  budgetOf(headers: { get(name: string): string | null }, at: number): Budget | null;
  tokensAt(budget: Budget, now: number): number;
  nextBudget(previous: Budget | null, fresh: Budget | null): Budget | null;
  backgroundReload(state: { now: number; lastInteraction: number; budget: Budget | null }): 'idle' | 'wait' | 'go';
};
const rules: ReloadRules = await import(new URL('../../../services/dashboard/public/reload.js', import.meta.url).href);

const MINUTE = 60_000;
const NOW = Date.UTC(2026, 10, 27, 12);
const headers = (fields: Record<string, string>) => new Headers(fields);
/** A Starter tenant's answer (burst 10, 1 token a second), as the gateway sends it. */
const starter = (remaining: number) =>
  headers({
    'ratelimit-policy': '"burst";q=10;w=10',
    'ratelimit-limit': '10',
    'ratelimit-remaining': String(remaining),
    'ratelimit-reset': '1',
  });

describe('the KPI page reloading itself', () => {
  describe('when the page is opened', () => {
    it('reloads every 60 s, or every ?refresh= seconds from 5 up', () => {
      expect(rules.DEFAULT_REFRESH_S).toBe(60);
      expect(rules.refreshPeriodMs('')).toBe(60_000);
      expect(rules.refreshPeriodMs('?refresh=5')).toBe(5_000);
      expect(rules.refreshPeriodMs('?refresh=300')).toBe(300_000);
      for (const search of ['?refresh=4', '?refresh=-1', '?refresh=abc', '?refresh='])
        expect(rules.refreshPeriodMs(search), search).toBe(60_000);
    });
  });

  describe("when an answer describes the tenant's bucket", () => {
    it('reads the tokens left, the burst and the refill rate, and counts the refill since', () => {
      const budget = rules.budgetOf(starter(2), NOW);
      expect(budget).toEqual({ remaining: 2, burst: 10, perSecond: 1, at: NOW });
      expect(rules.tokensAt(budget!, NOW)).toBe(2);
      expect(rules.tokensAt(budget!, NOW + 2_500)).toBe(4.5);
      expect(rules.tokensAt(budget!, NOW + MINUTE)).toBe(10); // never more than the burst
    });

    it('falls back to RateLimit-Limit without a policy (no refill counted), and says nothing without the fields', () => {
      expect(rules.budgetOf(headers({ 'ratelimit-limit': '8', 'ratelimit-remaining': '3' }), NOW)).toEqual({
        remaining: 3,
        burst: 8,
        perSecond: 0,
        at: NOW,
      });
      expect(rules.budgetOf(headers({}), NOW)).toBeNull();
      expect(rules.budgetOf(headers({ 'ratelimit-remaining': 'x', 'ratelimit-limit': '8' }), NOW)).toBeNull();
    });
  });

  describe('when concurrent calls are answered out of order', () => {
    it('keeps the lower count: the last answer to arrive may have been counted before the others', () => {
      const counted = rules.budgetOf(starter(3), NOW)!; // the seventh call the limiter counted…
      const late = rules.budgetOf(starter(9), NOW + 100)!; // …arrives before the first one
      expect(rules.nextBudget(counted, late)).toEqual({ remaining: 3.1, burst: 10, perSecond: 1, at: NOW + 100 });
      // A later answer with fewer tokens (other users spent some) wins.
      expect(rules.nextBudget(late, rules.budgetOf(starter(1), NOW + 200))).toMatchObject({ remaining: 1 });
      // Nothing new: the budget stays; nothing before: the answer's.
      expect(rules.nextBudget(counted, null)).toBe(counted);
      expect(rules.nextBudget(null, late)).toBe(late);
    });
  });

  describe('when a background reload is due', () => {
    const used = NOW - MINUTE;
    it('goes while the bucket holds at least half its burst, and waits below it', () => {
      const pro = (remaining: number) => ({ remaining, burst: 100, perSecond: 10, at: NOW });
      expect(rules.backgroundReload({ now: NOW, lastInteraction: used, budget: pro(50) })).toBe('go');
      expect(rules.backgroundReload({ now: NOW, lastInteraction: used, budget: pro(49) })).toBe('wait');
      // What flowed back since the answer counts: 49 left a second ago is 59 now.
      expect(rules.backgroundReload({ now: NOW + 1_000, lastInteraction: used, budget: pro(49) })).toBe('go');
      // A bucket that refills 1 a minute stays low.
      const slow = { remaining: 6, burst: 24, perSecond: 1 / 60, at: NOW };
      expect(rules.backgroundReload({ now: NOW + MINUTE, lastInteraction: used, budget: slow })).toBe('wait');
      // No answer has described the bucket yet: nothing to go by, it goes.
      expect(rules.backgroundReload({ now: NOW, lastInteraction: used, budget: null })).toBe('go');
    });

    it('stops once nobody has used the page for 15 minutes, whatever the bucket', () => {
      expect(rules.IDLE_STOP_MS).toBe(15 * MINUTE);
      const full = { remaining: 10, burst: 10, perSecond: 1, at: NOW };
      expect(rules.backgroundReload({ now: NOW, lastInteraction: NOW - 15 * MINUTE + 1, budget: full })).toBe('go');
      expect(rules.backgroundReload({ now: NOW, lastInteraction: NOW - 15 * MINUTE, budget: full })).toBe('idle');
      expect(rules.backgroundReload({ now: NOW, lastInteraction: NOW - 15 * MINUTE, budget: null })).toBe('idle');
    });
  });
});
