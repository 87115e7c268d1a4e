/** UTC instant arithmetic shared by the workforce reads. */
export const DAY_MS = 86_400_000;

/**
 * ISO text PostgreSQL reads. Past year 9999 JavaScript writes `+010000-…`, which PostgreSQL
 * refuses; it takes the plain five-digit year.
 */
export const pgIso = (ms: number): string => new Date(ms).toISOString().replace(/^\+0*(\d{5,})/, '$1');

/** `YYYY-MM-DD` of a day-aligned instant. */
export const pgDate = (ms: number): string => pgIso(ms).slice(0, pgIso(ms).indexOf('T'));

export const floorDayMs = (ms: number): number => Math.floor(ms / DAY_MS) * DAY_MS;

export function floorMonthMs(ms: number): number {
  const d = new Date(ms);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
}
