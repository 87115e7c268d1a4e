import { z } from 'zod';
import { isoInstant } from './intervals.ts';

/**
 * The open bucket of a time series: every series of the service (KPIs, workforce…) ends, when its
 * range reaches the present, with the bucket still open, answered with what has happened so far
 * and flagged `partial: true`. Without it a new tenant's charts stay empty for their first hour
 * (or day) while the summary beside them already shows activity, and every chart lags by one bucket.
 *
 * The rule is one function so that every series places that point the same way; what a metric
 * holds at the point (its value "as of" the horizon) is each series' own business.
 */

/** One instant a series answers: a closed interval boundary, or the horizon in the bucket still open. */
export type SeriesInstant = { readonly at: number; readonly partial: boolean };

/**
 * The instants of a series over `[from, to]` whose inputs are applied up to `horizon`:
 * - every closed boundary (`boundaries`, ascending, all within `[from, to]`) up to the horizon;
 *   boundaries after it are not known yet and are left out;
 * - then the horizon itself, partial, when the range reaches it (`from ≤ horizon ≤ to`) and it is
 *   not a boundary: the bucket that ends at the next boundary is still open. A range that ends
 *   before the horizon (in the past) never gets one: all its buckets are closed.
 */
export function withOpenBucket(boundaries: readonly number[], range: { from: number; to: number }, horizon: number): SeriesInstant[] {
  const closed = boundaries.filter((t) => t <= horizon).map((at) => ({ at, partial: false }));
  const reaches = range.from <= horizon && horizon <= range.to;
  const onBoundary = closed.length > 0 && closed.at(-1)!.at === horizon;
  return reaches && !onBoundary ? [...closed, { at: horizon, partial: true }] : closed;
}

/**
 * A point of a series as the API answers it. `partial` is present, and `true`, only on the last
 * point when its bucket is still open; closed points carry no flag (so a series without an open
 * bucket reads exactly as before, and 1,000 points carry no 1,000 `false`s).
 */
export const seriesPointSchema = z
  .object({
    at: z.string().describe('ISO 8601 UTC instant: an interval boundary, or the series `asOf` for the open bucket'),
    value: z.number(),
    partial: z
      .literal(true)
      .optional()
      .describe('Present (true) only on the last point while its bucket is still open: the value so far, as of `at`'),
  })
  .meta({ id: 'SeriesPoint' });

export type SeriesPoint = z.infer<typeof seriesPointSchema>;

/** A point for the API: `at` as ISO 8601, `partial` only when true. */
export function seriesPoint(instant: SeriesInstant, value: number): SeriesPoint {
  const at = isoInstant(instant.at);
  return instant.partial ? { at, value, partial: true } : { at, value };
}
