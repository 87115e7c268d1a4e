// What the page's modules find on `window`, for the type checker only (never served).
import type UPlot from 'uplot';

declare global {
  /** uPlot's browser build (vendor/uPlot.iife.min.js), which index.html loads before the modules. */
  const uPlot: typeof UPlot;
  /** A chart drawn by it. */
  type uPlot = UPlot;
  interface Window {
    /** Set once the page has wired itself up. */
    kpiDashboard?: { ready: boolean };
  }
}
