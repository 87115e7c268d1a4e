// @ts-check
/* One uPlot chart per metric, each in its own <figure> (created once, reused across ranges):
 * drawn from a series, or showing its own error with a "Try again". uPlot is the vendored
 * browser build, loaded by index.html before the page's modules. */
/* global document, uPlot */
import { HttpError } from './api.js';
import { compact, formatter } from './format.js';

/**
 * @typedef {{ id: string, title: string, kind: string }} Metric
 * @typedef {{ points: Array<{ at: string, value: number, partial?: boolean }>, interval?: 'hour' | 'day' | 'week' | 'month', currency?: string | null }} Series
 */

/** @type {Map<string, uPlot>} Each metric's uPlot, destroyed before its figure is drawn again. */
const charts = new Map();

/**
 * A figure's part that `figureFor` always creates.
 * @param {HTMLElement} figure
 * @param {string} selector
 */
export const part = (figure, selector) => /** @type {HTMLElement} */ (figure.querySelector(selector));

/**
 * The figure `data-<kind>="<id>"` in `#<containerId>`, created the first time (a heading
 * `#<idPrefix>-<id>`, a plot, the `extra` parts, a caption); a chart keeps its figure across ranges.
 * @param {{ containerId: string, kind: string, idPrefix: string, id: string, title: string, extra?: HTMLElement[] }} spec
 * @returns {HTMLElement}
 */
export function figureFor({ containerId, kind, idPrefix, id, title, extra = [] }) {
  /** @type {HTMLElement | null} */
  let figure = document.querySelector(`figure[data-${kind}="${id}"]`);
  if (figure) return figure;
  figure = document.createElement('figure');
  figure.dataset[kind] = id;
  const heading = document.createElement('h3');
  heading.id = `${idPrefix}-${id}`;
  heading.textContent = title;
  figure.setAttribute('aria-labelledby', heading.id);
  const plot = document.createElement('div');
  plot.className = 'plot';
  figure.append(heading, plot, ...extra, document.createElement('figcaption'));
  /** @type {HTMLElement} */ (document.getElementById(containerId)).append(figure);
  return figure;
}

/**
 * The metric's figure, created (title, plot, caption) the first time.
 * @param {Metric} metric
 * @returns {HTMLElement}
 */
export const chartFigure = (metric) =>
  figureFor({ containerId: 'charts', kind: 'metric', idPrefix: 'chart', id: metric.id, title: metric.title });

/**
 * Empties a chart's plot (destroying its uPlot) and marks what it now shows.
 * @param {Metric} metric
 * @param {string} rangeKey
 */
function resetFigure(metric, rangeKey) {
  const figure = chartFigure(metric);
  const old = charts.get(metric.id);
  if (old) old.destroy();
  charts.delete(metric.id);
  part(figure, '.plot').replaceChildren();
  figure.dataset.range = rangeKey;
  figure.removeAttribute('aria-busy');
  figure.querySelector('.legend')?.remove();
  delete figure.dataset.points;
  delete figure.dataset.partial;
  delete figure.dataset.partialAt;
  delete figure.dataset.error;
  return figure;
}

/**
 * What the open bucket is called on a chart of this interval. Buckets are UTC (days from 00:00
 * UTC, weeks from Monday): "today" in the browser's zone would be another bucket for most users.
 */
const OPEN_BUCKET = { hour: 'this UTC hour', day: 'this UTC day', week: 'this UTC week', month: 'this UTC month' };
/** uPlot draws its time axis in this zone: the series' buckets, not the browser's. */
const UTC = 'Etc/UTC';

/**
 * The legend under a chart with an open bucket: a solid swatch for closed buckets, a dashed one
 * for the bucket still open (canvas lines are invisible to a screen reader; this text is not).
 * @param {string} open
 */
function legend(open) {
  const el = document.createElement('p');
  el.className = 'legend';
  const swatch = (/** @type {string} */ kind, /** @type {string} */ text) => {
    const item = document.createElement('span');
    const mark = document.createElement('span');
    mark.className = `swatch ${kind}`;
    mark.setAttribute('aria-hidden', 'true');
    item.append(mark, text);
    return item;
  };
  el.append(swatch('closed', 'closed'), swatch('partial', `${open} so far (partial)`));
  return el;
}

/**
 * Draws a series. A last point flagged `partial` (the bucket still open, as of the series' asOf)
 * is drawn apart: a dashed segment from the last closed point and a hollow marker, with a legend,
 * so a value that is still growing is not read as a drop.
 * @param {Metric} metric
 * @param {Series} series
 * @param {string} rangeKey
 */
export function drawChart(metric, series, rangeKey) {
  const figure = resetFigure(metric, rangeKey);
  const plot = part(figure, '.plot');
  const caption = part(figure, 'figcaption');
  figure.dataset.points = String(series.points.length);
  const format = formatter(metric.kind, series.currency);
  const values = series.points.map((p) => p.value);
  const open = series.points.at(-1)?.partial === true;
  if (open) {
    figure.dataset.partial = String(values[values.length - 1]);
    figure.dataset.partialAt = series.points[series.points.length - 1].at;
  }
  if (series.points.length === 0 || values.every((v) => v === 0)) {
    const empty = document.createElement('p');
    empty.className = 'empty';
    empty.textContent = 'No data in this range.';
    plot.append(empty);
    caption.textContent = `${series.points.length} points, all empty`;
    return;
  }
  const xs = series.points.map((p) => Date.parse(p.at) / 1000);
  const last = values[values.length - 1];
  const openName = OPEN_BUCKET[series.interval || 'hour'] || 'the current bucket';
  caption.textContent =
    `${series.points.length} points · latest ${format(last)}${open ? ` (${openName} so far)` : ''}` +
    ` · min ${format(Math.min(...values))} · max ${format(Math.max(...values))}`;
  const n = values.length;
  // Two uPlot series over the same xs: the closed buckets (solid), and the open one (dashed, from
  // the last closed point, so the line stays continuous).
  const closed = open ? values.map((v, i) => (i < n - 1 ? v : null)) : values;
  const partial = values.map((v, i) => (open && i >= n - 2 ? v : null));
  const width = Math.max(300, plot.clientWidth || 360);
  const chart = new uPlot(
    {
      width,
      height: 180,
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), UTC),
      axes: [
        { stroke: '#374151', label: 'UTC', labelSize: 18 },
        { stroke: '#374151', size: 80, values: (_u, ticks) => ticks.map(compact(metric.kind, series.currency)) },
      ],
      series: [
        {},
        { label: metric.title, stroke: '#1d4ed8', width: 2, fill: 'rgba(29, 78, 216, 0.08)', points: { show: n < 60 } },
        {
          label: `${metric.title} (${openName} so far)`,
          stroke: '#1d4ed8',
          width: 2,
          dash: [6, 4],
          points: { show: true, filter: [n - 1], size: 9, width: 2, fill: '#ffffff' },
        },
      ],
    },
    [xs, closed, partial],
    plot,
  );
  chart.root.querySelector('canvas')?.setAttribute('aria-hidden', 'true');
  charts.set(metric.id, chart);
  if (open) plot.after(legend(openName));
}

/**
 * One chart's own error, in its figure; the other charts are not affected.
 * @param {Metric} metric
 * @param {Error} error
 * @param {string} rangeKey
 * @param {() => void} retry
 */
export function chartError(metric, error, rangeKey, retry) {
  const figure = resetFigure(metric, rangeKey);
  figure.dataset.error = error instanceof HttpError ? String(error.status) : 'failed';
  const message = document.createElement('p');
  message.className = 'error';
  message.textContent =
    error instanceof HttpError && error.status === 429
      ? `Rate limited: this chart could not be loaded${error.retryAfter !== null ? ` (the API asks to wait ${Math.ceil(error.retryAfter)} s)` : ''}.`
      : `Could not load this chart: ${error.message}`;
  const again = document.createElement('button');
  again.type = 'button';
  again.textContent = 'Try again';
  again.addEventListener('click', retry);
  part(figure, '.plot').append(message, again);
  part(figure, 'figcaption').textContent = '';
}
