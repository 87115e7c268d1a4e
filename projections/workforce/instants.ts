import { isoInstant } from '../../shared/series/intervals.ts';

/** Instants as the workforce SQL takes them (the interval arithmetic is shared/series/intervals.ts). */

/**
 * ISO text PostgreSQL reads. Past year 9999 JavaScript writes `+010000-…`, which PostgreSQL
 * refuses; it takes the plain five-digit year.
 */
export const pgIso = (ms: number): string => isoInstant(ms).replace(/^\+0*(\d{5,})/, '$1');

/** `YYYY-MM-DD` of a day-aligned instant. */
export const pgDate = (ms: number): string => {
  const iso = pgIso(ms);
  return iso.slice(0, iso.indexOf('T'));
};
