import { isoInstant } from '../series/intervals.ts';

/**
 * PostgreSQL's text output of `timestamptz` / `timestamp` (DateStyle ISO) read into ISO 8601 UTC
 * strings, exactly. `new Date(text)` is not exact: V8's fallback parser applies two-digit-year
 * heuristics, so `0045-03-01 00:00:00+00` read as 2045. This parser takes
 * the fields apart itself and builds the instant with `setUTCFullYear`, which has no such
 * heuristic (unlike `Date.UTC`, which maps years 0–99 to 1900–1999).
 *
 * Forms handled: `YYYY-MM-DD HH:MM:SS[.ffffff][±HH[:MM[:SS]]][ BC]`, years of 4 or more digits,
 * offsets with minutes or seconds (historic local-mean-time offsets in non-UTC sessions),
 * `infinity`/`-infinity` (no instant: an error, as no column of ours may hold them).
 * Sub-millisecond digits are truncated: the service's instants have millisecond precision.
 */
const TIMESTAMP = /^(\d{4,})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([+-])(\d{2})(?::?(\d{2}))?(?::?(\d{2}))?)?( BC)?$/;

export function parsePostgresTimestamp(text: string, options: { readonly assumeUtc?: boolean } = {}): string {
  const match = TIMESTAMP.exec(text);
  if (!match) throw new Error(`not a PostgreSQL ISO timestamp: ${JSON.stringify(text.slice(0, 64))}`);
  const [, y = '', mo = '', d = '', h = '', mi = '', s = '', fraction, sign, oh, om, os, bc] = match;
  if (sign === undefined && !options.assumeUtc) throw new Error(`timestamptz without an offset: ${JSON.stringify(text)}`);
  const millis = fraction ? fraction.slice(0, 3).padEnd(3, '0') : '000';
  // The common case (a UTC session, years 1000–9999): the text already holds the ISO fields.
  if (
    !bc &&
    y.length === 4 &&
    y[0] !== '0' &&
    (sign === undefined || (Number(oh) === 0 && Number(om ?? 0) === 0 && Number(os ?? 0) === 0))
  ) {
    return `${y}-${mo}-${d}T${h}:${mi}:${s}.${millis}Z`;
  }
  // 1 BC is year 0 in ISO 8601 (astronomical numbering).
  const year = bc ? 1 - Number(y) : Number(y);
  const ms = Number(millis);
  const date = new Date(0);
  date.setUTCFullYear(year, Number(mo) - 1, Number(d));
  date.setUTCHours(Number(h), Number(mi), Number(s), ms);
  const offsetSeconds = sign ? (sign === '-' ? -1 : 1) * (Number(oh) * 3600 + Number(om ?? 0) * 60 + Number(os ?? 0)) : 0;
  const utc = date.getTime() - offsetSeconds * 1000;
  if (Number.isNaN(utc)) throw new Error(`timestamp out of JavaScript's range: ${JSON.stringify(text)}`);
  return new Date(utc).toISOString();
}

/**
 * The other way: an instant as ISO text PostgreSQL reads. Range edges can pass year 9999
 * (`hiredTo=9999-12-31` ends at 10000-01-01), where JavaScript writes `+010000-…`, which
 * PostgreSQL refuses; it takes the plain five-digit year.
 */
export const pgIso = (ms: number): string => isoInstant(ms).replace(/^\+0*(\d{5,})/, '$1');

/** `YYYY-MM-DD` of a day-aligned instant. */
export const pgDate = (ms: number): string => {
  const iso = pgIso(ms);
  return iso.slice(0, iso.indexOf('T'));
};
