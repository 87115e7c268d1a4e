// @ts-check
/* Numbers as the page shows them, by the metric's kind: in full on the cards and captions,
 * compact on the charts' axes. */

/**
 * How a metric's values read in full (cards, captions).
 * @param {string} kind money, percent, ms or count
 * @param {string | null} [currency] ISO 4217, for money
 * @returns {(v: number) => string}
 */
export function formatter(kind, currency) {
  switch (kind) {
    case 'money':
      return currency
        ? (v) => new Intl.NumberFormat('en', { style: 'currency', currency, maximumFractionDigits: 2 }).format(v)
        : (v) => new Intl.NumberFormat('en', { maximumFractionDigits: 2 }).format(v);
    case 'percent':
      return (v) => `${(v * 100).toFixed(1)} %`;
    case 'ms':
      return (v) => `${new Intl.NumberFormat('en', { maximumFractionDigits: 1 }).format(v)} ms`;
    default:
      return (v) => new Intl.NumberFormat('en').format(v);
  }
}

/**
 * Axis ticks: short (€3K, 30 %, 120 ms) so they fit beside the plot.
 * @param {string} kind
 * @param {string | null} [currency]
 * @returns {(v: number) => string}
 */
export function compact(kind, currency) {
  const short = new Intl.NumberFormat('en', { notation: 'compact', maximumFractionDigits: 1 });
  switch (kind) {
    case 'money':
      return currency
        ? (v) => new Intl.NumberFormat('en', { style: 'currency', currency, notation: 'compact', maximumFractionDigits: 1 }).format(v)
        : (v) => short.format(v);
    case 'percent':
      return (v) => `${Math.round(v * 1000) / 10} %`;
    case 'ms':
      return (v) => `${short.format(v)} ms`;
    default:
      return (v) => short.format(v);
  }
}
