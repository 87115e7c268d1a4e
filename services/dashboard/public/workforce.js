// @ts-check
/* The Workforce section: headcount by department, hires and exits, and the turnover rate over the
 * range the KPI charts show (GET /v1/analytics/workforce and /v1/analytics/workforce/series). The
 * page loads it when the analyst opens it, and again on a range change while it is open: a range
 * costs it up to 11 calls of the tenant's rate limit (the department summary, a headcount series
 * for the total and for each of the TOP_DEPARTMENTS largest departments, hires, exits, turnover):
 * more than a Starter plan's burst of 10 alone, on top of the KPI section's calls. */
/* global document, URLSearchParams */
import { api, HttpError, isAbort } from './api.js';
import { formatter } from './format.js';
import { drawLines, lineError, lineFigure } from './lines.js';

/** Bucket size per range: the workforce figures are daily at the finest. */
/** @type {Record<string, 'day' | 'week' | 'month'>} */
const INTERVALS = { '24h': 'day', '7d': 'day', '30d': 'day', '90d': 'week', '365d': 'month' };
/** Departments drawn on their own: the largest at the end of the range (all count in the total). */
const TOP_DEPARTMENTS = 6;
/** Distinguishable on white at WCAG AA contrast; the total is drawn in the text colour. */
const PALETTE = ['#1d4ed8', '#b45309', '#047857', '#7c3aed', '#be123c', '#0e7490'];
const TOTAL_COLOR = '#111827';

/** @type {Record<'headcount' | 'movements' | 'turnover', import('./lines.js').Chart>} */
const CHARTS = {
  headcount: { id: 'headcount', title: 'Headcount by department', kind: 'count' },
  movements: { id: 'movements', title: 'Hires and exits', kind: 'count' },
  turnover: { id: 'turnover', title: 'Turnover rate', kind: 'percent' },
};

/**
 * @typedef {{ rangeKey: string, from: string, to: string }} View
 * @typedef {{ points: Array<{ at: string, value: number, partial?: true }> }} Series
 * @typedef {{ at: string[], lines: import('./lines.js').Line[], partial: boolean, caption: string }} Drawing
 */

const count = formatter('count');
const percent = formatter('percent');
/** @param {Series} series */
const valuesOf = (series) => series.points.map((p) => p.value);
/** @param {Series} series */
const isPartial = (series) => series.points.at(-1)?.partial === true;
/** @param {Series} series */
const latest = (series) => series.points.at(-1)?.value ?? 0;
/** @param {number} n @param {string} one @param {string} many */
const plural = (n, one, many) => `${count(n)} ${n === 1 ? one : many}`;

/**
 * A series of the view's range and bucket size, for the whole tenant or one department.
 * @param {View} view
 * @param {AbortSignal} signal
 * @returns {(metric: string, department?: string) => Promise<Series>}
 */
const seriesFor = (view, signal) => (metric, department) => {
  const query = new URLSearchParams({ metric, interval: INTERVALS[view.rangeKey] || 'day', from: view.from, to: view.to });
  if (department !== undefined) query.set('department', department);
  return api(`/v1/analytics/workforce/series?${query}`, signal);
};

/**
 * Headcount over the range: the total, and each of the largest departments at its end.
 * @param {View} view
 * @param {AbortSignal} signal
 * @returns {Promise<Drawing>}
 */
async function headcount(view, signal) {
  const summary = await api(`/v1/analytics/workforce?${new URLSearchParams({ at: view.to })}`, signal);
  /** @type {Array<[string, number]>} */
  const sizes = Object.entries(summary.byDepartment);
  // Employees without a department ("") count in the total only: a series takes a department's slug.
  const departments = sizes
    .filter(([slug]) => slug !== '')
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .slice(0, TOP_DEPARTMENTS)
    .map(([slug]) => slug);
  const series = seriesFor(view, signal);
  const [total, ...each] = await Promise.all([series('headcount'), ...departments.map((slug) => series('headcount', slug))]);
  const partial = isPartial(total);
  const perDepartment = departments.map((slug, i) => `${slug} ${count(latest(each[i] ?? total))}`).join(', ');
  return {
    at: total.points.map((p) => p.at),
    partial,
    lines: [
      { label: 'All', values: valuesOf(total), color: TOTAL_COLOR, width: 3 },
      ...departments.map((slug, i) => ({
        label: slug,
        values: valuesOf(each[i] ?? total),
        color: PALETTE[i % PALETTE.length] || TOTAL_COLOR,
      })),
    ],
    caption: `${partial ? 'Now' : 'At the end of the range'}: ${plural(latest(total), 'employee', 'employees')}${perDepartment ? ` (${perDepartment})` : ''}`,
  };
}

/**
 * Hires and exits per bucket, and their sums over the range.
 * @param {View} view
 * @param {AbortSignal} signal
 * @returns {Promise<Drawing>}
 */
async function movements(view, signal) {
  const series = seriesFor(view, signal);
  const [hires, exits] = await Promise.all([series('hires'), series('exits')]);
  /** @param {Series} s */
  const sum = (s) => s.points.reduce((n, p) => n + p.value, 0);
  return {
    at: hires.points.map((p) => p.at),
    partial: isPartial(hires),
    lines: [
      { label: 'Hires', values: valuesOf(hires), color: PALETTE[2] || TOTAL_COLOR },
      { label: 'Exits', values: valuesOf(exits), color: PALETTE[4] || TOTAL_COLOR },
    ],
    caption: `In this range: ${plural(sum(hires), 'hire', 'hires')}, ${plural(sum(exits), 'exit', 'exits')}`,
  };
}

/**
 * Turnover per bucket: exits ÷ the average of its start and end headcount.
 * @param {View} view
 * @param {AbortSignal} signal
 * @returns {Promise<Drawing>}
 */
async function turnover(view, signal) {
  const rate = await seriesFor(view, signal)('turnoverRate');
  const partial = isPartial(rate);
  return {
    at: rate.points.map((p) => p.at),
    partial,
    lines: [{ label: 'Turnover rate', values: valuesOf(rate), color: PALETTE[0] || TOTAL_COLOR }],
    caption: `${partial ? 'Latest bucket so far' : 'Latest bucket'}: ${percent(latest(rate))}`,
  };
}

/**
 * One chart: drawn, or its own error with a "Try again" that loads it alone. Resolves to whether
 * it failed. A 403 aborts the section's load and calls `forbidden`.
 * @param {import('./lines.js').Chart} chart
 * @param {(view: View, signal: AbortSignal) => Promise<Drawing>} load
 * @param {View} view
 * @param {AbortController} controller
 * @param {() => void} forbidden
 * @returns {Promise<boolean>}
 */
async function loadChart(chart, load, view, controller, forbidden) {
  const { signal } = controller;
  lineFigure(chart).setAttribute('aria-busy', 'true');
  try {
    const drawing = await load(view, signal);
    if (!signal.aborted) drawLines(chart, drawing, view.rangeKey);
    return false;
  } catch (error) {
    if (signal.aborted || isAbort(error)) return false; // superseded: the newer load draws this chart
    if (error instanceof HttpError && error.status === 403) {
      controller.abort();
      forbidden();
      return false;
    }
    lineError(chart, /** @type {Error} */ (error), view.rangeKey, () => {
      loadChart(chart, load, view, controller, forbidden)
        .then(() => settled(view, signal))
        .catch(() => undefined);
    });
    return true;
  }
}

/**
 * The section's status line once its charts are answered.
 * @param {View} view
 * @param {AbortSignal} signal
 */
function settled(view, signal) {
  if (signal.aborted) return;
  const failed = Object.values(CHARTS).filter((chart) => lineFigure(chart).dataset.error !== undefined).length;
  const interval = INTERVALS[view.rangeKey] || 'day';
  /** @type {HTMLElement} */ (document.getElementById('workforce-status')).textContent =
    `${{ day: 'Daily', week: 'Weekly', month: 'Monthly' }[interval]} points; a dashed last stretch is a bucket still open.` +
    (failed ? ` ${failed} of ${Object.keys(CHARTS).length} charts could not be loaded.` : '');
}

/**
 * Every Workforce chart over `view`, each drawn as its answers arrive. `controller` is this load's:
 * a newer load (or signing out) aborts it, and an aborted load draws nothing.
 * @param {View} view
 * @param {AbortController} controller
 * @param {() => void} forbidden shows the page's "no access" notice
 */
export async function loadWorkforce(view, controller, forbidden) {
  const { signal } = controller;
  const container = /** @type {HTMLElement} */ (document.getElementById('workforce-charts'));
  /** @type {HTMLElement} */ (document.getElementById('workforce-status')).textContent = 'Loading workforce charts…';
  container.setAttribute('aria-busy', 'true');
  await Promise.all([
    loadChart(CHARTS.headcount, headcount, view, controller, forbidden),
    loadChart(CHARTS.movements, movements, view, controller, forbidden),
    loadChart(CHARTS.turnover, turnover, view, controller, forbidden),
  ]);
  if (signal.aborted) return;
  container.dataset.range = view.rangeKey;
  container.setAttribute('aria-busy', 'false');
  settled(view, signal);
}
