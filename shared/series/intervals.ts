/** The buckets of a series (KPI, workforce): UTC hours, days, ISO weeks (from Monday) and months. */
export const SERIES_INTERVALS = ['hour', 'day', 'week', 'month'] as const;
export type SeriesInterval = (typeof SERIES_INTERVALS)[number];
export const MAX_SERIES_POINTS = 1_000;

export const HOUR = 3_600_000;
export const DAY = 86_400_000;

export function floorTo(interval: SeriesInterval, t: number): number {
  switch (interval) {
    case 'hour':
      return t - (((t % HOUR) + HOUR) % HOUR);
    case 'day':
      return t - (((t % DAY) + DAY) % DAY);
    case 'week': {
      const day = floorTo('day', t);
      return day - ((new Date(day).getUTCDay() + 6) % 7) * DAY; // ISO weeks start on Monday
    }
    case 'month': {
      const d = new Date(t);
      return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
    }
    default: {
      const never: never = interval;
      throw new Error(`unknown interval ${String(never)}`);
    }
  }
}

const two = (n: number): string => (n < 10 ? `0${n}` : String(n));

/**
 * `new Date(t).toISOString()`, from the UTC fields: the built-in costs several times as much per
 * call, and a series formats an instant for each of up to `MAX_SERIES_POINTS` points. Years
 * outside 0000–9999 (which ISO writes with a sign and six digits) go to the built-in.
 */
export function isoInstant(t: number): string {
  const d = new Date(t);
  const year = d.getUTCFullYear();
  if (!(year >= 0 && year <= 9999)) return d.toISOString();
  const ms = d.getUTCMilliseconds();
  return `${String(year).padStart(4, '0')}-${two(d.getUTCMonth() + 1)}-${two(d.getUTCDate())}T${two(d.getUTCHours())}:${two(d.getUTCMinutes())}:${two(d.getUTCSeconds())}.${ms < 10 ? '00' : ms < 100 ? '0' : ''}${ms}Z`;
}

/**
 * The exclusive end that includes the instant `t`: instants are whole milliseconds, so what holds
 * at `t` inclusive is what holds just before `t + 1 ms` (a bucket closing at now, an as-of read).
 */
export const inclusiveEnd = (t: number): number => t + 1;

/** `t` (aligned to `interval`) moved by `n` intervals. */
export function addIntervals(interval: SeriesInterval, t: number, n: number): number {
  switch (interval) {
    case 'hour':
      return t + n * HOUR;
    case 'day':
      return t + n * DAY;
    case 'week':
      return t + n * 7 * DAY;
    case 'month': {
      const d = new Date(t);
      return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + n, 1);
    }
    default: {
      const never: never = interval;
      throw new Error(`unknown interval ${String(never)}`);
    }
  }
}

/**
 * The points of a series: every `interval` boundary (UTC; weeks start on Monday) in [from, to].
 * `null` when there would be more than `MAX_SERIES_POINTS` (checked without building them).
 */
export function seriesInstants(from: number, to: number, interval: SeriesInterval): number[] | null {
  const floor = floorTo(interval, from);
  let t = floor === from ? from : addIntervals(interval, floor, 1);
  const out: number[] = [];
  while (t <= to) {
    if (out.length === MAX_SERIES_POINTS) return null;
    out.push(t);
    t = addIntervals(interval, t, 1);
  }
  return out;
}
