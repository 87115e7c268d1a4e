// @ts-check
/* Charts of several series on one time axis (the Workforce section): one uPlot each, with a legend
 * of its own, each in its own <figure> (created once, reused across ranges). A series whose last
 * bucket is still open (the API flags the point `partial`) draws that last stretch dashed, so a
 * count that is still growing does not read as a drop. */
/* global document, uPlot */
import { HttpError } from './api.js';
import { figureFor, part } from './charts.js';
import { compact } from './format.js';

/**
 * @typedef {{ label: string, values: number[], color: string, width?: number }} Line
 * @typedef {{ id: string, title: string, kind: string }} Chart
 */

/** @type {Map<string, uPlot>} Each chart's uPlot, destroyed before its figure is drawn again. */
const plots = new Map();

/**
 * Destroys every chart's uPlot and removes the figures: a uPlot only removed from the page would
 * keep its window listeners and stay in this map, holding the previous tenant's data after sign-out.
 */
export function resetLines() {
  for (const plot of plots.values()) plot.destroy();
  plots.clear();
  /** @type {HTMLElement} */ (document.getElementById('workforce-charts')).replaceChildren();
}

/**
 * The chart's figure in #workforce-charts, created (title, plot, legend, caption) the first time.
 * @param {Chart} chart
 * @returns {HTMLElement}
 */
export function lineFigure(chart) {
  const legend = document.createElement('ul');
  legend.className = 'series-legend';
  return figureFor({
    containerId: 'workforce-charts',
    kind: 'workforce',
    idPrefix: 'workforce',
    id: chart.id,
    title: chart.title,
    extra: [legend],
  });
}

/**
 * Empties a chart (destroying its uPlot) and marks the range it now shows.
 * @param {Chart} chart
 * @param {string} rangeKey
 */
function resetFigure(chart, rangeKey) {
  const figure = lineFigure(chart);
  plots.get(chart.id)?.destroy();
  plots.delete(chart.id);
  part(figure, '.plot').replaceChildren();
  part(figure, '.series-legend').replaceChildren();
  part(figure, 'figcaption').textContent = '';
  figure.dataset.range = rangeKey;
  figure.removeAttribute('aria-busy');
  for (const key of ['points', 'partial', 'series', 'error']) delete figure.dataset[key];
  return figure;
}

/**
 * Draws `lines` over the bucket starts `at`; `partial`: the last bucket is still open. `caption`
 * says in words what the chart shows (the latest figures, the range's totals).
 * @param {Chart} chart
 * @param {{ at: string[], lines: Line[], partial: boolean, caption: string }} data
 * @param {string} rangeKey
 */
export function drawLines(chart, { at, lines, partial, caption }, rangeKey) {
  const figure = resetFigure(chart, rangeKey);
  const plot = part(figure, '.plot');
  figure.dataset.points = String(at.length);
  figure.dataset.partial = String(partial);
  figure.dataset.series = JSON.stringify(lines.map(({ label, values }) => ({ label, values })));
  part(figure, 'figcaption').textContent = caption;
  if (at.length === 0 || lines.every((line) => line.values.every((v) => v === 0))) {
    const empty = document.createElement('p');
    empty.className = 'empty';
    empty.textContent = 'No data in this range.';
    plot.append(empty);
    return;
  }
  for (const line of lines) {
    const item = document.createElement('li');
    const swatch = document.createElement('span');
    swatch.className = 'swatch';
    swatch.style.background = line.color; // CSSOM, which the page's CSP allows (a style attribute it would not)
    item.append(swatch, line.label);
    part(figure, '.series-legend').append(item);
  }
  const last = at.length - 1;
  /** @type {import('uplot').Series[]} */
  const series = [{}];
  /** @type {Array<Array<number | null>>} */
  const columns = [at.map((iso) => Date.parse(iso) / 1000)];
  for (const line of lines) {
    const stroke = { stroke: line.color, width: line.width ?? 2, points: { show: at.length < 60 } };
    // Closed buckets solid; the open one, and the segment leading to it, dashed.
    series.push({ label: line.label, ...stroke });
    columns.push(line.values.map((v, i) => (partial && i === last ? null : v)));
    if (partial) {
      series.push({ label: `${line.label} (so far)`, ...stroke, dash: [6, 4] });
      columns.push(line.values.map((v, i) => (i >= last - 1 ? v : null)));
    }
  }
  const width = Math.max(300, plot.clientWidth || 360);
  const drawn = new uPlot(
    {
      width,
      height: 200,
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      axes: [{ stroke: '#374151' }, { stroke: '#374151', size: 70, values: (_u, ticks) => ticks.map(compact(chart.kind)) }],
      series,
    },
    /** @type {import('uplot').AlignedData} */ (/** @type {unknown} */ (columns)),
    plot,
  );
  drawn.root.querySelector('canvas')?.setAttribute('aria-hidden', 'true');
  plots.set(chart.id, drawn);
}

/**
 * One chart's own error, with a "Try again"; the other charts are not affected.
 * @param {Chart} chart
 * @param {Error} error
 * @param {string} rangeKey
 * @param {() => void} retry
 */
export function lineError(chart, error, rangeKey, retry) {
  const figure = resetFigure(chart, rangeKey);
  figure.dataset.error = error instanceof HttpError ? String(error.status) : 'failed';
  const message = document.createElement('p');
  message.className = 'error';
  message.textContent =
    error instanceof HttpError && error.status === 429
      ? 'Rate limited: this chart could not be loaded.'
      : `Could not load this chart: ${error.message}`;
  const again = document.createElement('button');
  again.type = 'button';
  again.textContent = 'Try again';
  again.addEventListener('click', retry);
  part(figure, '.plot').append(message, again);
}
