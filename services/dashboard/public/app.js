/* The analysts' KPI page (SPEC §8). Plain browser JavaScript, no build step, no framework:
 * sign in → summary cards (GET /v1/analytics/kpi) → one uPlot chart per metric
 * (GET /v1/analytics/kpi/series) over the chosen range. Tokens live in sessionStorage (this tab
 * only); a 401 is answered by one refresh (POST /v1/auth/refresh) then a retry; a 403 shows
 * what is missing instead of an empty page. */
/* global document, window, sessionStorage, fetch, uPlot, URLSearchParams */
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

const $ = (id) => document.getElementById(id);
const session = {
  get: () => JSON.parse(sessionStorage.getItem('kpi-session') || 'null'),
  set: (value) => sessionStorage.setItem('kpi-session', JSON.stringify(value)),
  clear: () => sessionStorage.removeItem('kpi-session'),
};

class HttpError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status;
  }
}

async function send(method, path, { body, auth = true } = {}) {
  const s = session.get();
  const headers = { accept: 'application/json', 'x-tenant': s ? s.tenant : '' };
  if (body) headers['content-type'] = 'application/json';
  if (auth && s) headers.authorization = `Bearer ${s.accessToken}`;
  const response = await fetch(path, { method, headers, body: body ? JSON.stringify(body) : undefined });
  const data = response.status === 204 ? null : await response.json().catch(() => null);
  if (!response.ok) throw new HttpError(response.status, data);
  return data;
}

/** GET with one refresh on 401 (expired access token), then sign-in when that fails too. */
async function api(path) {
  try {
    return await send('GET', path);
  } catch (error) {
    if (!(error instanceof HttpError) || error.status !== 401) throw error;
    const s = session.get();
    try {
      const tokens = await send('POST', '/v1/auth/refresh', { body: { refreshToken: s.refreshToken }, auth: false });
      session.set({ ...s, accessToken: tokens.accessToken, refreshToken: tokens.refreshToken });
    } catch {
      signOut('Your session has expired. Please sign in again.');
      throw error;
    }
    return send('GET', path);
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

function signOut(message) {
  const s = session.get();
  if (s && s.refreshToken) send('POST', '/v1/auth/logout', { body: { refreshToken: s.refreshToken } }).catch(() => undefined);
  session.clear();
  show('signin');
  $('signin-error').textContent = message || '';
  $('tenant').focus();
}

async function loadSummary() {
  const kpi = await api('/v1/analytics/kpi');
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

function drawChart(metric, series) {
  const figure = chartFigure(metric);
  const plot = figure.querySelector('.plot');
  const caption = figure.querySelector('figcaption');
  const old = charts.get(metric.id);
  if (old) old.destroy();
  charts.delete(metric.id);
  plot.replaceChildren();
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

async function loadCharts(rangeKey) {
  const range = RANGES[rangeKey] || RANGES['7d'];
  const to = new Date();
  const from = new Date(to.getTime() - range.span);
  $('status').textContent = 'Loading charts…';
  $('charts').setAttribute('aria-busy', 'true');
  const results = await Promise.all(
    METRICS.map(async (metric) => {
      const query = new URLSearchParams({ metric: metric.id, from: from.toISOString(), to: to.toISOString(), interval: range.interval });
      return [metric, await api(`/v1/analytics/kpi/series?${query}`)];
    }),
  );
  for (const [metric, series] of results) drawChart(metric, series);
  $('charts').setAttribute('aria-busy', 'false');
  $('charts').dataset.range = rangeKey;
  $('status').textContent = `Showing ${rangeKey === '365d' ? 'the last 12 months' : `the last ${rangeKey.replace('h', ' hours').replace('d', ' days')}`} (${{ hour: 'hourly', day: 'daily', week: 'weekly' }[range.interval]} points).`;
}

async function loadAll() {
  try {
    show('dashboard');
    await loadSummary();
    await loadCharts(document.querySelector('input[name="range"]:checked').value);
  } catch (error) {
    if (error instanceof HttpError && error.status === 403) show('forbidden');
    else if (error instanceof HttpError && error.status === 401) return; // signOut already showed the form
    else $('status').textContent = `Could not load the KPIs: ${error.message}`;
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
    await loadAll();
    $('main').focus();
  } catch (error) {
    session.clear();
    $('signin-error').textContent =
      error instanceof HttpError && error.status === 401 ? 'Wrong email or password.' : `Sign-in failed: ${error.message}`;
  }
});

$('signout').addEventListener('click', () => signOut('You are signed out.'));
for (const input of document.querySelectorAll('input[name="range"]')) {
  input.addEventListener('change', () => loadCharts(input.value).catch((error) => {
    if (error instanceof HttpError && error.status === 403) show('forbidden');
    else $('status').textContent = `Could not load the charts: ${error.message}`;
  }));
}

if (session.get() && session.get().accessToken) loadAll();
else show('signin');
window.kpiDashboard = { ready: true };
