import { z } from 'zod';

/**
 * The service's input limits, as zod building blocks every route composes (body, query,
 * params, headers). What PostgreSQL or the event store cannot hold — NUL, lone surrogates,
 * instants outside 1970–9999 — is refused here with a 400 naming the field, before it can
 * reach an event or a query. Each block sets `maxLength`/`maximum`, so the OpenAPI document
 * (generated from the same schemas) states every field's limit.
 *
 * Lengths are counted in UTF-16 code units (JavaScript `length`), the unit zod and JSON Schema
 * `maxLength` implementations here use; an emoji counts 2.
 */

/** Years an instant may lie in (UTC, after normalising its offset). */
export const MIN_YEAR = 1970;
export const MAX_YEAR = 9999;
/** Hire dates of existing staff may go back further. */
export const HIRE_MIN_YEAR = 1900;

/** Longest instant text accepted: `2024-05-01T09:00:00.123456789+05:30` is 35. */
export const INSTANT_MAX_LENGTH = 40;

// A high surrogate not followed by a low one, or a low one not preceded by a high one.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Valid Unicode text that PostgreSQL `text` and `jsonb` can store: no NUL, no lone surrogate. */
export function isStorableText(value: string): boolean {
  return !value.includes('\u0000') && !LONE_SURROGATE.test(value);
}

const STORABLE_MESSAGE = 'must be valid Unicode text without NUL characters or lone surrogates';

const LONE_SURROGATES = new RegExp(LONE_SURROGATE.source, 'g');

/**
 * `text` made storable and cut to at most `max` UTF-16 code units, for text the service records
 * but does not control (an error a peer caused): NUL and lone surrogates become U+FFFD, and a cut
 * that would split a surrogate pair drops its first half.
 */
export function storableText(text: string, max: number): string {
  const clean = text.replace(LONE_SURROGATES, '\uFFFD').replaceAll('\u0000', '\uFFFD');
  if (clean.length <= max) return clean;
  const cut = clean.slice(0, max);
  return /[\uD800-\uDBFF]$/.test(cut) ? cut.slice(0, -1) : cut;
}

export type SafeTextOptions = {
  /** Minimum length after trimming (default 0). */
  readonly min?: number;
  /** Trim surrounding whitespace before the length checks (default false). */
  readonly trim?: boolean;
};

/** A string of at most `max` UTF-16 code units that the database can store. */
export function safeText(max: number, options: SafeTextOptions = {}) {
  const base = options.trim ? z.string().trim() : z.string();
  const min = options.min ?? 0;
  return (min > 0 ? base.min(min) : base).max(max).refine(isStorableText, STORABLE_MESSAGE);
}

/**
 * An identifier from another system (a billing provider's `evt_…`): 1–`max` characters, storable,
 * and printable — no control characters (Unicode category Cc: C0, DEL, C1), so it shows in logs
 * and URLs as what it is.
 */
export function printableText(max: number) {
  return safeText(max, { min: 1 }).refine((v) => !/\p{Cc}/u.test(v), 'must be printable (no control characters)');
}

function yearOf(instant: string): number {
  const ms = Date.parse(instant);
  return Number.isNaN(ms) ? Number.NaN : new Date(ms).getUTCFullYear();
}

/** True when `value` names an instant whose UTC year lies in `minYear`..9999. */
export function isInstantInRange(value: string, minYear: number = MIN_YEAR): boolean {
  // An offset moves an instant by less than a day, so a written year strictly inside the range
  // stays inside after normalising: only the edge years need the (costlier) full parse.
  const written = /^\d{4}-/.test(value) ? Number(value.slice(0, 4)) : Number.NaN;
  if (written > minYear && written < MAX_YEAR) return true;
  const year = yearOf(value);
  return year >= minYear && year <= MAX_YEAR;
}

const rangeMessage = (minYear: number) => `must lie in the years ${minYear}–${MAX_YEAR} (UTC)`;

/**
 * An ISO 8601 date-time with `Z` or an offset, in years `minYear`..9999 once normalised to UTC
 * (`9999-12-31T23:00:00-05:00` is year 10000 and refused); answered as `toISOString()` (UTC, ms).
 */
export function instant(options: { readonly minYear?: number } = {}) {
  const minYear = options.minYear ?? MIN_YEAR;
  return z.iso
    .datetime({ offset: true })
    .max(INSTANT_MAX_LENGTH)
    .refine((v) => isInstantInRange(v, minYear), rangeMessage(minYear))
    .transform((v) => new Date(v).toISOString())
    .describe(`ISO 8601 date-time with Z or an offset, years ${minYear}–${MAX_YEAR} after normalising to UTC`);
}

const DATE = /^\d{4}-\d{2}-\d{2}$/;
const isCalendarDate = (v: string) => {
  if (!DATE.test(v)) return false;
  const ms = Date.parse(`${v}T00:00:00Z`);
  // Date.parse rolls 2023-02-30 over to March; a real date reads back as itself.
  return !Number.isNaN(ms) && new Date(ms).toISOString().startsWith(v);
};
const DATE_TIME = z.iso.datetime({ offset: true });
const isDateTime = (v: string) => DATE_TIME.safeParse(v).success && !Number.isNaN(Date.parse(v));

/** A filter bound: `at` is the instant (a date's first instant), `dateOnly` says which form was sent. */
export type DateBound = { readonly at: string; readonly dateOnly: boolean };

/**
 * Where a range ends when `bound` is its upper bound: a date covers its whole day (up to the
 * next midnight, exclusive), a date-time is itself (inclusive).
 */
export function rangeEnd(bound: DateBound): { readonly ms: number; readonly inclusive: boolean } {
  const at = Date.parse(bound.at);
  return bound.dateOnly ? { ms: at + 86_400_000, inclusive: false } : { ms: at, inclusive: true };
}

/**
 * An ISO 8601 date (`2024-05-01`) or date-time with offset, for range filters, in years
 * `minYear`..9999. The route decides what a date means as an upper bound (its whole day).
 */
export function dateOrInstant(options: { readonly minYear?: number } = {}) {
  const minYear = options.minYear ?? MIN_YEAR;
  return z
    .string()
    .max(INSTANT_MAX_LENGTH)
    .refine((v) => isCalendarDate(v) || isDateTime(v), 'must be an ISO 8601 date (2024-05-01) or date-time with offset')
    .refine((v) => isInstantInRange(DATE.test(v) ? `${v}T00:00:00Z` : v, minYear), rangeMessage(minYear))
    .transform((v): DateBound =>
      DATE.test(v) ? { at: `${v}T00:00:00.000Z`, dateOnly: true } : { at: new Date(v).toISOString(), dateOnly: false },
    )
    .describe(`ISO 8601 date or date-time with offset, years ${minYear}–${MAX_YEAR}`);
}

/** Digits only (what `?page=2` may hold): `Number()` alone would also read `+1`, `1e0`, `0x1`. */
const DECIMAL_DIGITS = /^\s*\d+(\.0*)?\s*$/;

/**
 * An integer in `min`..`max`; query strings are coerced (`?page=2`), anything non-integral is a 400,
 * and so is a string that is not written in decimal digits.
 */
export function boundedInt(min: number, max: number) {
  return z.preprocess(
    (v) => (typeof v === 'string' && !DECIMAL_DIGITS.test(v) ? Number.NaN : v),
    z.coerce.number().int().min(min).max(max),
  );
}

/** A uuid (fixed length 36). */
export const uuid = () => z.uuid().max(36);

/** `X-Min-Position`: a log position as a write returned it in `X-Log-Position` (`<commit>-<prepare>`). */
export const LOG_POSITION_PATTERN = /^\d{1,20}-\d{1,20}$/;
export const logPositionText = () =>
  z.string().max(41).regex(LOG_POSITION_PATTERN, 'must be a log position as returned in X-Log-Position (<commit>-<prepare>)');

/**
 * `If-Match` (RFC 9110 §13.1.1): `*` or a comma-separated list of entity tags, strong
 * (`"3"`) or weak (`W/"3"`). Any other text is a 400; a well-formed tag that names no
 * current revision (a weak one, say) is the route's 412.
 */
const ETAG_CHARS = String.raw`[\x21\x23-\x7e]*`;
const ENTITY_TAG = String.raw`(?:W\/)?"${ETAG_CHARS}"`;
export const IF_MATCH_PATTERN = new RegExp(String.raw`^[ \t]*(?:\*|${ENTITY_TAG}(?:[ \t]*,[ \t]*${ENTITY_TAG})*)[ \t]*$`);
export const ifMatchHeader = () =>
  z
    .string()
    .max(256)
    .regex(IF_MATCH_PATTERN, 'must be * or entity tags such as "3" (RFC 9110)')
    .describe('Expected revision, as a strong ETag ("3"), or a list of them ("3", "4"): any current one matches');

/**
 * The opaque values of a well-formed `If-Match`'s strong tags (`"3"` → `3`), or null for `*`.
 * Weak tags are left out: `If-Match` compares strongly (RFC 9110 §13.1.1), so they never match.
 */
export function strongEntityTags(header: string): string[] | null {
  if (header.trim() === '*') return null;
  return [...header.matchAll(new RegExp(String.raw`(W\/)?"(${ETAG_CHARS})"`, 'g'))].flatMap(([, weak, opaque]) =>
    weak === undefined && opaque !== undefined ? [opaque] : [],
  );
}
