/* The analysts' KPI page (SPEC §8). Plain browser JavaScript, no build step, no framework:
 * sign in → summary cards (GET /v1/analytics/kpi) → one uPlot chart per metric
 * (GET /v1/analytics/kpi/series) over the chosen range. Tokens live in sessionStorage (this tab
 * only); a 401 is answered by one refresh (POST /v1/auth/refresh) then a retry; a 403 shows
 * what is missing instead of an empty page.
 *
 * Every API call draws on the tenant's rate limit (SPEC §5; Starter: burst 10, 1 a second), and a
 * range change asks for 7 series at once. So the page is a polite client of its own API: a 429
 * is retried after its Retry-After (at most MAX_RETRIES times, never waiting more than
 * MAX_WAIT_S); once the API has said "no token left" (a 429, or RateLimit-Remaining: 0) calls go
 * out one at a time, each after the announced wait, instead of as a burst that is refused again;
 * the status line says how long. Each chart loads and fails on its own, and a range change aborts
 * the calls of the one before, waits included, so an old answer never replaces a newer chart. */
/* global document, window, sessionStorage, fetch, uPlot, URLSearchParams, AbortController, setTimeout, setInterval, clearInterval */
'use strict';

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
const RANGES = {
  '24h': { span: DAY, interval: 'hour' },
  '7d': { span: 7 * DAY, interval: 'hour' },
  '30d': { span: 30 * DAY, interval: 'day' },
  '90d': { span: 90 * DAY, interval: 'day' },
  '365d': { span: 365 * DAY, interval: 'week' },
};
/** Refusals (429, or 503 with Retry-After: the limiter is down and fails closed) one call waits out before it reports the error. */
const MAX_RETRIES = 4;
/** The longest single wait, in seconds: a longer Retry-After is reported, not waited for. */
const MAX_WAIT_S = 30;

const $ = (id) => document.getElementById(id);
const session = {
  get: () => JSON.parse(sessionStorage.getItem('kpi-session') || 'null'),
  set: (value) => sessionStorage.setItem('kpi-session', JSON.stringify(value)),
  clear: () => sessionStorage.removeItem('kpi-session'),
};

class HttpError extends Error {
  constructor(status, problem, retryAfter = null) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status;
    /** Seconds from Retry-After, or null. */
    this.retryAfter = retryAfter;
  }
}

const isAbort = (error) => error instanceof Error && error.name === 'AbortError';

/** Retry-After / RateLimit-Reset in seconds: delta-seconds (what this API sends) or an HTTP date; null when absent. */
function seconds(value) {
  if (value === null || value.trim() === '') return null;
  if (/^\d+$/.test(value.trim())) return Number(value);
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, (at - Date.now()) / 1000);
}

/** `promise`, or a rejection with the abort reason as soon as `signal` aborts. */
function abortable(promise, signal) {
  if (!signal) return promise;
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

const sleep = (ms, signal) => abortable(new Promise((resolve) => setTimeout(resolve, Math.max(0, ms))), signal);

async function send(method, path, { body, auth = true, signal, observe } = {}) {
  const s = session.get();
  const headers = { accept: 'application/json', 'x-tenant': s ? s.tenant : '' };
  if (body) headers['content-type'] = 'application/json';
  if (auth && s) headers.authorization = `Bearer ${s.accessToken}`;
  const response = await fetch(path, { method, headers, body: body ? JSON.stringify(body) : undefined, signal });
  if (observe) observe(response);
  const data = response.status === 204 ? null : await response.json().catch(() => null);
  if (!response.ok) throw new HttpError(response.status, data, seconds(response.headers.get('retry-after')));
  return data;
}

/* The tenant's rate limit as this page sees it (docs/rate-limits.md). All users of a tenant share
 * one bucket, so the page cannot know how many tokens are left; it only listens to what each
 * answer says. */
const gate = {
  /** Epoch ms: no call before this (from a Retry-After, or the RateLimit-Reset of a last token). */
  notBefore: 0,
  /** Whether a call was refused (429) since the queue last emptied: the status line says "retrying". */
  refused: false,
  /** Calls waiting for their turn or in flight through the queue. */
  queued: 0,
  /** While limited, each call waits for the one before it to be answered, then for notBefore. */
  tail: Promise.resolve(),
};

const limited = () => gate.queued > 0 || Date.now() < gate.notBefore;

/** Reads an API answer's rate-limit fields into the gate. */
function noteLimit(response) {
  const retryAfter = response.status === 429 || response.status === 503 ? seconds(response.headers.get('retry-after')) : null;
  const lastToken = response.headers.get('ratelimit-remaining') === '0';
  const wait = retryAfter !== null ? retryAfter : lastToken ? seconds(response.headers.get('ratelimit-reset')) : null;
  if (retryAfter !== null) gate.refused = true;
  if (wait !== null) gate.notBefore = Math.max(gate.notBefore, Date.now() + Math.min(wait, MAX_WAIT_S) * 1000);
  paintStatus();
}

/** Runs `call` now or, while the tenant is limited, after the calls queued before it and the announced wait. */
async function throttled(call, signal) {
  if (!limited()) return call();
  const previous = gate.tail;
  let release;
  gate.tail = new Promise((resolve) => (release = resolve));
  gate.queued += 1;
  paintStatus();
  try {
    await abortable(previous, signal);
    await sleep(Math.min(gate.notBefore - Date.now(), MAX_WAIT_S * 1000), signal);
    return await call();
  } finally {
    gate.queued -= 1;
    if (gate.queued === 0) gate.refused = false;
    release();
    paintStatus();
  }
}

let refreshing = null;

/** One POST /v1/auth/refresh for every call that met the expired token; false (and the sign-in form) when it fails. */
function refreshSession() {
  if (!refreshing) {
    refreshing = (async () => {
      try {
        const s = session.get();
        const tokens = await send('POST', '/v1/auth/refresh', { body: { refreshToken: s.refreshToken }, auth: false });
        session.set({ ...s, accessToken: tokens.accessToken, refreshToken: tokens.refreshToken });
        return true;
      } catch {
        signOut('Your session has expired. Please sign in again.');
        return false;
      }
    })().finally(() => {
      refreshing = null;
    });
  }
  return refreshing;
}

/**
 * GET through the gate. A refusal with Retry-After (429; 503 when the limiter is down) is retried
 * after it, at most MAX_RETRIES times and only when it is at most MAX_WAIT_S; a 401 gets one token
 * refresh, then the call again, and sign-in when the refresh fails too. `signal` aborts the call
 * wherever it is, waits included.
 */
async function api(path, signal) {
  let refreshed = false;
  let retries = 0;
  for (;;) {
    try {
      return await throttled(() => send('GET', path, { signal, observe: noteLimit }), signal);
    } catch (error) {
      if (!(error instanceof HttpError)) throw error;
      if (error.status === 401 && !refreshed) {
        refreshed = true;
        if (!(await refreshSession())) throw error;
      } else if ((error.status === 429 || error.status === 503) && error.retryAfter !== null && error.retryAfter <= MAX_WAIT_S && retries < MAX_RETRIES) {
        retries += 1;
      } else {
        throw error;
      }
    }
  }
}

function formatter(kind, currency) {
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

/** Axis ticks: short (€3K, 30 %, 120 ms) so they fit beside the plot. */
function compact(kind, currency) {
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

function show(view) {
  for (const id of ['signin', 'forbidden', 'dashboard']) $(id).hidden = id !== view;
  const s = session.get();
  $('signout').hidden = view === 'signin';
  $('who').hidden = view === 'signin' || !s;
  if (s) $('who').textContent = `${s.email} · ${s.tenant}`;
}

/** Each kind of load's latest AbortController: a newer load (or signing out) aborts the older, waits and retries included. */
const loads = { summary: null, charts: null };

function restart(kind) {
  if (loads[kind]) loads[kind].abort();
  loads[kind] = new AbortController();
  return loads[kind];
}

function signOut(message) {
  for (const kind of Object.keys(loads)) {
    if (loads[kind]) loads[kind].abort();
    loads[kind] = null;
  }
  gate.notBefore = 0; // the next sign-in may be another tenant, with its own bucket
  const s = session.get();
  if (s && s.refreshToken) send('POST', '/v1/auth/logout', { body: { refreshToken: s.refreshToken } }).catch(() => undefined);
  session.clear();
  show('signin');
  $('signin-error').textContent = message || '';
  $('tenant').focus();
}

/** The status line: what the page is doing or, while calls wait on the rate limit, for how long. */
let statusText = '';
let ticker = null;

function setStatus(text) {
  statusText = text;
  paintStatus();
}

function paintStatus() {
  const wait = Math.ceil((gate.notBefore - Date.now()) / 1000);
  const waiting = gate.queued > 0 && wait > 0;
  const text = !waiting ? statusText : gate.refused ? `Rate limited — retrying in ${wait} s` : `At the rate limit — continuing in ${wait} s`;
  if ($('status').textContent !== text) $('status').textContent = text;
  if (waiting && !ticker) ticker = setInterval(paintStatus, 250);
  if (!waiting && ticker) {
    clearInterval(ticker);
    ticker = null;
  }
}

async function loadSummary() {
  const { signal } = restart('summary');
  const kpi = await api('/v1/analytics/kpi', signal);
  for (const metric of METRICS) {
    const el = document.querySelector(`.value[data-metric="${metric.id}"]`);
    if (!el) continue;
    el.dataset.value = String(kpi[metric.id]);
    el.textContent = formatter(metric.kind, kpi.currency)(kpi[metric.id]);
  }
  $('asof').textContent = `As of ${new Date(kpi.asOf).toUTCString()}${kpi.currency ? ` · amounts in ${kpi.currency}` : ''}`;
  return kpi;
}

const charts = new Map();

function chartFigure(metric) {
  let figure = document.querySelector(`figure[data-metric="${metric.id}"]`);
  if (figure) return figure;
  figure = document.createElement('figure');
  figure.dataset.metric = metric.id;
  figure.setAttribute('aria-labelledby', `chart-${metric.id}`);
  const title = document.createElement('h3');
  title.id = `chart-${metric.id}`;
  title.textContent = metric.title;
  const plot = document.createElement('div');
  plot.className = 'plot';
  const caption = document.createElement('figcaption');
  figure.append(title, plot, caption);
  $('charts').append(figure);
  return figure;
}

/** Empties a chart's plot (destroying its uPlot) and marks what it now shows. */
function resetFigure(metric, rangeKey) {
  const figure = chartFigure(metric);
  const old = charts.get(metric.id);
  if (old) old.destroy();
  charts.delete(metric.id);
  figure.querySelector('.plot').replaceChildren();
  figure.dataset.range = rangeKey;
  figure.removeAttribute('aria-busy');
  delete figure.dataset.points;
  delete figure.dataset.error;
  return figure;
}

function drawChart(metric, series, rangeKey) {
  const figure = resetFigure(metric, rangeKey);
  const plot = figure.querySelector('.plot');
  const caption = figure.querySelector('figcaption');
  figure.dataset.points = String(series.points.length);
  const format = formatter(metric.kind, series.currency);
  const values = series.points.map((p) => p.value);
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
  caption.textContent = `${series.points.length} points · latest ${format(last)} · min ${format(Math.min(...values))} · max ${format(Math.max(...values))}`;
  const width = Math.max(300, plot.clientWidth || 360);
  const chart = new uPlot(
    {
      width,
      height: 180,
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      axes: [{ stroke: '#374151' }, { stroke: '#374151', size: 80, values: (_u, ticks) => ticks.map(compact(metric.kind, series.currency)) }],
      series: [{}, { label: metric.title, stroke: '#1d4ed8', width: 2, fill: 'rgba(29, 78, 216, 0.08)', points: { show: series.points.length < 60 } }],
    },
    [xs, values],
    plot,
  );
  chart.root.querySelector('canvas')?.setAttribute('aria-hidden', 'true');
  charts.set(metric.id, chart);
}

/** One chart's own error, in its figure; the other charts are not affected. */
function chartError(metric, error, rangeKey, retry) {
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
  figure.querySelector('.plot').append(message, again);
  figure.querySelector('figcaption').textContent = '';
}

const currentRange = () => document.querySelector('input[name="range"]:checked').value;

/**
 * Every chart over `rangeKey`, each drawn as its answer arrives. Aborts the load of the previous
 * range first (its queued and waiting calls included); an answer of an aborted load is dropped.
 */
/**
 * One metric's chart for a range's window: drawn from its series, or its own error with a "Try
 * again" that asks for this series alone (one call, not the range's seven). `controller` is the
 * range's: a newer range (or signing out) aborts it, retries included. Resolves to the error, or null.
 */
async function loadChart(metric, view, controller) {
  const { signal } = controller;
  const query = new URLSearchParams({ metric: metric.id, from: view.from, to: view.to, interval: view.interval });
  chartFigure(metric).setAttribute('aria-busy', 'true');
  try {
    const series = await api(`/v1/analytics/kpi/series?${query}`, signal);
    if (!signal.aborted) drawChart(metric, series, view.rangeKey);
    return null;
  } catch (error) {
    if (signal.aborted || isAbort(error)) return null; // superseded: the newer load draws this chart
    if (error instanceof HttpError && error.status === 403) {
      controller.abort();
      show('forbidden');
      return null;
    }
    chartError(metric, error, view.rangeKey, () =>
      loadChart(metric, view, controller)
        .then(() => chartsStatus(view, signal))
        .catch(() => undefined),
    );
    return error;
  }
}

/** The status line once a range's charts are settled: what it shows, and how many charts failed. */
function chartsStatus(view, signal) {
  if (signal.aborted) return;
  const failed = METRICS.filter((metric) => chartFigure(metric).dataset.error !== undefined).length;
  const { rangeKey, interval } = view;
  setStatus(
    `Showing ${rangeKey === '365d' ? 'the last 12 months' : `the last ${rangeKey.replace('h', ' hours').replace('d', ' days')}`} (${{ hour: 'hourly', day: 'daily', week: 'weekly' }[interval]} points).` +
      (failed ? ` ${failed} of ${METRICS.length} charts could not be loaded.` : ''),
  );
}

async function loadCharts(rangeKey) {
  const controller = restart('charts');
  const { signal } = controller;
  const range = RANGES[rangeKey] || RANGES['7d'];
  const to = new Date();
  const view = { rangeKey, from: new Date(to.getTime() - range.span).toISOString(), to: to.toISOString(), interval: range.interval };
  setStatus('Loading charts…');
  $('charts').setAttribute('aria-busy', 'true');
  await Promise.all(METRICS.map((metric) => loadChart(metric, view, controller)));
  if (signal.aborted) return;
  $('charts').setAttribute('aria-busy', 'false');
  $('charts').dataset.range = rangeKey;
  chartsStatus(view, signal);
}

async function loadAll() {
  show('dashboard');
  try {
    await loadSummary();
  } catch (error) {
    if (isAbort(error)) return;
    if (error instanceof HttpError && error.status === 403) return show('forbidden');
    if (error instanceof HttpError && error.status === 401) return; // signOut already showed the form
    $('asof').textContent = `Could not load the summary: ${error.message}`;
  }
  try {
    await loadCharts(currentRange());
  } catch (error) {
    setStatus(`Could not load the charts: ${error.message}`);
  }
}

$('signin-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const tenant = $('tenant').value.trim();
  const email = $('email').value.trim();
  const password = $('password').value;
  if (!tenant || !email || !password) {
    $('signin-error').textContent = 'Enter your tenant, email and password.';
    return;
  }
  $('signin-error').textContent = '';
  session.set({ tenant, email });
  try {
    const tokens = await send('POST', '/v1/auth/login', { body: { email, password }, auth: false });
    session.set({ tenant, email, accessToken: tokens.accessToken, refreshToken: tokens.refreshToken });
    $('password').value = '';
  } catch (error) {
    session.clear();
    $('signin-error').textContent =
      error instanceof HttpError && error.status === 401 ? 'Wrong email or password.' : `Sign-in failed: ${error.message}`;
    return;
  }
  await loadAll();
  $('main').focus();
});

$('signout').addEventListener('click', () => signOut('You are signed out.'));
for (const input of document.querySelectorAll('input[name="range"]')) {
  input.addEventListener('change', () => loadCharts(input.value).catch((error) => setStatus(`Could not load the charts: ${error.message}`)));
}

if (session.get() && session.get().accessToken) loadAll();
else show('signin');
window.kpiDashboard = { ready: true };
