// @ts-check
/* The analysts' KPI page, and its entry. Plain browser JavaScript, no build step, no framework:
 * sign in → summary cards (GET /v1/analytics/kpi) → one chart per metric
 * (GET /v1/analytics/kpi/series) over the chosen range, ending with the bucket still open, and,
 * once opened, the Workforce section (workforce.js) over the same range. Summary and charts reload
 * in the background (reload.js says when), quietly. A 403 shows what is missing instead of an
 * empty page. The status line says how long calls wait on the rate limit. Each chart loads and
 * fails on its own, and a range change aborts the calls of the one before, waits included, so an
 * old answer never replaces a newer chart. */
/* global document, window, URLSearchParams, AbortController, setInterval, clearInterval, setTimeout, clearTimeout */
import { api, gate, HttpError, isAbort, limited, onApiEvents, send, session } from './api.js';
import { chartError, chartFigure, drawChart } from './charts.js';
import { formatter } from './format.js';
import { backgroundReload, refreshPeriodMs } from './reload.js';
import { resetLines } from './lines.js';
import { loadWorkforce } from './workforce.js';

/** @type {import('./charts.js').Metric[]} */
const METRICS = [
  { id: 'mrr', title: 'MRR', kind: 'money' },
  { id: 'arr', title: 'ARR', kind: 'money' },
  { id: 'churnRate', title: 'Churn rate (30 days)', kind: 'percent' },
  { id: 'dau', title: 'Daily active users', kind: 'count' },
  { id: 'mau', title: 'Monthly active users', kind: 'count' },
  { id: 'apiLatencyP95Ms', title: 'API latency p95', kind: 'ms' },
  { id: 'requests', title: 'Requests', kind: 'count' },
];
const HOUR = 3600e3;
const DAY = 24 * HOUR;
/** One bucket of each interval: a range ends one bucket ahead, so it reaches the open bucket even on a clock a little behind the server's. */
const BUCKET = { hour: HOUR, day: DAY, week: 7 * DAY };
/** How often the cards and charts reload in the background while the page is visible and in use. */
const REFRESH_MS = refreshPeriodMs(window.location.search);
/** @type {Record<string, { span: number, interval: 'hour' | 'day' | 'week' }>} */
const RANGES = {
  '24h': { span: DAY, interval: 'hour' },
  '7d': { span: 7 * DAY, interval: 'hour' },
  '30d': { span: 30 * DAY, interval: 'day' },
  '90d': { span: 90 * DAY, interval: 'day' },
  '365d': { span: 365 * DAY, interval: 'week' },
};

/**
 * An element of index.html, which has them all.
 * @param {string} id
 */
const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));
/**
 * An input of the sign-in form.
 * @param {string} id
 */
const field = (id) => /** @type {HTMLInputElement} */ (document.getElementById(id));

/**
 * What a caught error says; what the page catches is an Error (fetch's, an HttpError, a fault).
 * @param {unknown} error
 */
const messageOf = (error) => /** @type {Error} */ (error).message;

/** @param {'signin' | 'forbidden' | 'dashboard'} view */
function show(view) {
  for (const id of ['signin', 'forbidden', 'dashboard']) $(id).hidden = id !== view;
  const s = session.get();
  $('signout').hidden = view === 'signin';
  $('who').hidden = view === 'signin' || !s;
  if (s) $('who').textContent = `${s.email} · ${s.tenant}`;
}

/** Each kind of load's latest AbortController: a newer load (or signing out) aborts the older, waits and retries included. */
/** @type {Record<'summary' | 'charts' | 'workforce', AbortController | null>} */
const loads = { summary: null, charts: null, workforce: null };

/** @param {keyof typeof loads} kind */
function restart(kind) {
  if (loads[kind]) loads[kind].abort();
  const controller = new AbortController();
  loads[kind] = controller;
  return controller;
}

/** @param {string} [message] */
function signOut(message) {
  for (const kind of /** @type {Array<keyof typeof loads>} */ (Object.keys(loads))) {
    if (loads[kind]) loads[kind].abort();
    loads[kind] = null;
  }
  gate.notBefore = 0; // the next sign-in may be another tenant, with its own bucket
  gate.budget = null;
  // Nor may it see this one's workforce: the section closes, its charts go.
  /** @type {HTMLDetailsElement} */ ($('workforce')).open = false;
  resetLines();
  delete $('workforce-charts').dataset.range;
  $('workforce-status').textContent = '';
  const s = session.get();
  if (s && s.refreshToken) send('POST', '/v1/auth/logout', { body: { refreshToken: s.refreshToken } }).catch(() => undefined);
  session.clear();
  show('signin');
  $('signin-error').textContent = message || '';
  field('tenant').focus();
}

/** The status line: what the page is doing or, while calls wait on the rate limit, for how long. */
let statusText = '';
/** @type {ReturnType<typeof setInterval> | null} */
let ticker = null;

/** @param {string} text */
function setStatus(text) {
  statusText = text;
  paintStatus();
}

function paintStatus() {
  const wait = Math.ceil((gate.notBefore - Date.now()) / 1000);
  const waiting = gate.queued > 0 && wait > 0;
  const text = !waiting
    ? statusText
    : gate.refused
      ? `Rate limited — retrying in ${wait} s`
      : `At the rate limit — continuing in ${wait} s`;
  if ($('status').textContent !== text) $('status').textContent = text;
  if (waiting && !ticker) ticker = setInterval(paintStatus, 250);
  if (!waiting && ticker) {
    clearInterval(ticker);
    ticker = null;
  }
}

/** @param {boolean} background */
async function loadSummary(background) {
  const { signal } = restart('summary');
  const kpi = await api('/v1/analytics/kpi', signal, { background });
  for (const metric of METRICS) {
    /** @type {HTMLElement | null} */
    const el = document.querySelector(`.value[data-metric="${metric.id}"]`);
    if (!el) continue;
    el.dataset.value = String(kpi[metric.id]);
    el.textContent = formatter(metric.kind, kpi.currency)(kpi[metric.id]);
  }
  $('asof').textContent = `As of ${new Date(kpi.asOf).toUTCString()}${kpi.currency ? ` · amounts in ${kpi.currency}` : ''}`;
  return kpi;
}

const currentRange = () => /** @type {HTMLInputElement} */ (document.querySelector('input[name="range"]:checked')).value;

/** @typedef {{ rangeKey: string, from: string, to: string, interval: 'hour' | 'day' | 'week' }} View */

/**
 * The window a range shows, ending now.
 * @param {string} rangeKey
 * @returns {View}
 */
function viewOf(rangeKey) {
  const range = RANGES[rangeKey] || RANGES['7d'];
  const to = new Date();
  return { rangeKey, from: new Date(to.getTime() - range.span).toISOString(), to: to.toISOString(), interval: range.interval };
}

const workforceSection = () => /** @type {HTMLDetailsElement} */ ($('workforce'));

/** The Workforce section over the chosen range, when it is open (it costs its own calls of the rate limit). */
function loadWorkforceSection() {
  if (!workforceSection().open) return;
  loadWorkforce(viewOf(currentRange()), restart('workforce'), () => show('forbidden')).catch((error) => {
    $('workforce-status').textContent = `Could not load the workforce charts: ${messageOf(error)}`;
  });
}

/**
 * One metric's chart for a range's window: drawn from its series, or its own error with a "Try
 * again" that asks for this series alone (one call, not the range's seven). `controller` is the
 * range's: a newer range (or signing out) aborts it, retries included. A background reload that
 * fails keeps the chart drawn before (a 429 or 503 says nothing new about the data). Resolves to
 * the error, or null.
 * @param {import('./charts.js').Metric} metric
 * @param {View} view
 * @param {AbortController} controller
 * @param {boolean} [background]
 * @returns {Promise<Error | null>}
 */
async function loadChart(metric, view, controller, background = false) {
  const { signal } = controller;
  const query = new URLSearchParams({ metric: metric.id, from: view.from, to: view.to, interval: view.interval });
  const figure = chartFigure(metric);
  figure.setAttribute('aria-busy', 'true');
  try {
    const series = await api(`/v1/analytics/kpi/series?${query}`, signal, { background });
    if (!signal.aborted) drawChart(metric, series, view.rangeKey);
    return null;
  } catch (error) {
    if (signal.aborted || isAbort(error)) return null; // superseded: the newer load draws this chart
    if (error instanceof HttpError && error.status === 403) {
      controller.abort();
      show('forbidden');
      return null;
    }
    if (background && figure.dataset.points !== undefined && figure.dataset.error === undefined) {
      figure.removeAttribute('aria-busy');
      return /** @type {Error} */ (error);
    }
    chartError(metric, /** @type {Error} */ (error), view.rangeKey, () =>
      loadChart(metric, view, controller)
        .then(() => chartsStatus(view, signal))
        .catch(() => undefined),
    );
    return /** @type {Error} */ (error);
  }
}

/**
 * The status line once a range's charts are settled: what it shows, and how many charts failed.
 * @param {View} view
 * @param {AbortSignal} signal
 */
function chartsStatus(view, signal) {
  if (signal.aborted) return;
  const failed = METRICS.filter((metric) => chartFigure(metric).dataset.error !== undefined).length;
  const { rangeKey, interval } = view;
  setStatus(
    `Showing ${rangeKey === '365d' ? 'the last 12 months' : `the last ${rangeKey.replace('h', ' hours').replace('d', ' days')}`} (${{ hour: 'hourly', day: 'daily', week: 'weekly' }[interval]} points).` +
      (failed ? ` ${failed} of ${METRICS.length} charts could not be loaded.` : ''),
  );
}

/**
 * Every chart over `rangeKey`, each drawn as its answer arrives. Aborts the load of the previous
 * range first (its queued and waiting calls included); an answer of an aborted load is dropped.
 * A background reload leaves the status line as it is (it says the same once settled).
 * @param {string} rangeKey
 * @param {boolean} [background]
 */
async function loadCharts(rangeKey, background = false) {
  const controller = restart('charts');
  const { signal } = controller;
  const range = RANGES[rangeKey] || RANGES['7d'];
  const now = Date.now();
  /** @type {View} */
  const view = {
    rangeKey,
    from: new Date(now - range.span).toISOString(),
    to: new Date(now + BUCKET[range.interval]).toISOString(),
    interval: range.interval,
  };
  if (!background) setStatus('Loading charts…');
  $('charts').setAttribute('aria-busy', 'true');
  await Promise.all(METRICS.map((metric) => loadChart(metric, view, controller, background)));
  if (signal.aborted) return;
  $('charts').setAttribute('aria-busy', 'false');
  $('charts').dataset.range = rangeKey;
  chartsStatus(view, signal);
}

/** The load in progress (sign-in, a range change, a reload), or null: a reload never aborts one. */
/** @type {Promise<unknown> | null} */
let loading = null;
/** @type {ReturnType<typeof setTimeout> | null} */
let nextReload = null;

/**
 * Runs a load, remembered as the one in progress until it settles; the next reload is due
 * REFRESH_MS after it.
 * @param {() => Promise<unknown>} load
 */
function tracked(load) {
  const current = load().finally(() => {
    if (loading !== current) return;
    loading = null;
    scheduleReload();
  });
  loading = current;
  return current;
}

/** @param {number} [delay] */
function scheduleReload(delay = REFRESH_MS) {
  if (nextReload) clearTimeout(nextReload);
  nextReload = setTimeout(reload, delay);
}

/** When the user last used the page; background reloads stop once it is too long ago (reload.js). */
let lastInteraction = Date.now();
/**
 * Whether background reloads stopped for want of a user. The next interaction resumes them with a
 * reload a second later, unless that interaction starts a load itself (a range change).
 */
let idle = false;

for (const type of ['pointerdown', 'pointermove', 'keydown', 'wheel', 'touchstart', 'focusin']) {
  document.addEventListener(
    type,
    () => {
      lastInteraction = Date.now();
      if (!idle) return;
      idle = false;
      scheduleReload(1_000);
    },
    { capture: true, passive: true },
  );
}

/**
 * A background reload of the cards and the charts of the current range. Put off while something
 * loads, the tab is hidden, calls wait on the rate limit or the tenant's bucket is below half its
 * burst: a reload must not spend the tokens the tenant's other users (or this page's "Try again")
 * are waiting for. Stopped when nobody has used the page for a while.
 */
function reload() {
  nextReload = null;
  if (!session.get()?.accessToken || !$('signin').hidden) return; // signed out: sign-in starts them again
  if (loading || document.visibilityState !== 'visible' || $('dashboard').hidden || limited()) return scheduleReload();
  const decision = backgroundReload({ now: Date.now(), lastInteraction, budget: gate.budget });
  if (decision === 'idle') idle = true;
  else if (decision === 'wait') scheduleReload();
  else tracked(() => loadAll(true)).catch(() => undefined);
}

/**
 * The cards, then the charts. In the background a failure keeps what is shown: the cards and
 * their "As of" line stay as the last answer left them.
 * @param {boolean} [background]
 */
async function loadAll(background = false) {
  show('dashboard');
  try {
    await loadSummary(background);
  } catch (error) {
    if (isAbort(error)) return;
    if (error instanceof HttpError && error.status === 403) return show('forbidden');
    if (error instanceof HttpError && error.status === 401) return; // signOut already showed the form
    if (!background) $('asof').textContent = `Could not load the summary: ${messageOf(error)}`;
  }
  try {
    await loadCharts(currentRange(), background);
  } catch (error) {
    if (!background) setStatus(`Could not load the charts: ${messageOf(error)}`);
  }
}

$('signin-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const tenant = field('tenant').value.trim();
  const email = field('email').value.trim();
  const password = field('password').value;
  if (!tenant || !email || !password) {
    $('signin-error').textContent = 'Enter your tenant, email and password.';
    return;
  }
  $('signin-error').textContent = '';
  session.set({ tenant, email });
  try {
    const tokens = await send('POST', '/v1/auth/login', { body: { email, password }, auth: false });
    session.set({ tenant, email, accessToken: tokens.accessToken, refreshToken: tokens.refreshToken });
    field('password').value = '';
  } catch (error) {
    session.clear();
    $('signin-error').textContent =
      error instanceof HttpError && error.status === 401 ? 'Wrong email or password.' : `Sign-in failed: ${messageOf(error)}`;
    return;
  }
  await tracked(loadAll);
  $('main').focus();
});

onApiEvents({ gateChanged: paintStatus, expired: signOut });
$('signout').addEventListener('click', () => signOut('You are signed out.'));
for (const input of document.querySelectorAll('input[name="range"]')) {
  input.addEventListener('change', () => {
    tracked(() => loadCharts(/** @type {HTMLInputElement} */ (input).value)).catch((error) =>
      setStatus(`Could not load the charts: ${messageOf(error)}`),
    );
    loadWorkforceSection();
  });
}
workforceSection().addEventListener('toggle', () => {
  if (workforceSection().open) loadWorkforceSection();
  else loads.workforce?.abort();
});

if (session.get()?.accessToken) tracked(loadAll);
else show('signin');
window.kpiDashboard = { ready: true };
