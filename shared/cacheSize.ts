/** The most entries a bounded cache is given: lru-cache sets aside arrays of its whole size up front. */
export const MAX_CACHE_SIZE = 1_000_000;

/**
 * A cache size as lru-cache takes it, a whole number from 1: at least one entry is kept, at most
 * `MAX_CACHE_SIZE`, and no number (none given, or NaN) means `fallback`.
 */
export const cacheSize = (asked: number | undefined, fallback: number): number =>
  asked === undefined || Number.isNaN(asked) ? fallback : Math.min(MAX_CACHE_SIZE, Math.max(1, Math.trunc(asked)));
