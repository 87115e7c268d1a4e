import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { FastifyPluginAsync } from 'fastify';

/**
 * `GET /dashboard`: a small page for analysts, served from the project's own files —
 * no CDN, so a machine without internet renders it. The chart library (uPlot) is served from
 * node_modules. Public (the page signs in through /v1/auth/login itself), so it is registered
 * among the gateway's public routes, in its own encapsulated context.
 *
 * A fixed set of files is read once at start and answered from memory: a few lines here instead of
 * @fastify/static (directory listing, ranges, send's stat per request) for what is a closed set.
 */
const require = createRequire(import.meta.url);
const uplotDist = dirname(require.resolve('uplot/dist/uPlot.iife.min.js'));
const here = join(import.meta.dirname, 'public');

const FILES: Record<string, { path: string; type: string }> = {
  '/dashboard': { path: join(here, 'index.html'), type: 'text/html; charset=utf-8' },
  // The page's ES modules: index.html loads page.js, which imports the others.
  '/dashboard/page.js': { path: join(here, 'page.js'), type: 'text/javascript; charset=utf-8' },
  '/dashboard/api.js': { path: join(here, 'api.js'), type: 'text/javascript; charset=utf-8' },
  '/dashboard/format.js': { path: join(here, 'format.js'), type: 'text/javascript; charset=utf-8' },
  '/dashboard/charts.js': { path: join(here, 'charts.js'), type: 'text/javascript; charset=utf-8' },
  '/dashboard/lines.js': { path: join(here, 'lines.js'), type: 'text/javascript; charset=utf-8' },
  '/dashboard/workforce.js': { path: join(here, 'workforce.js'), type: 'text/javascript; charset=utf-8' },
  '/dashboard/reload.js': { path: join(here, 'reload.js'), type: 'text/javascript; charset=utf-8' },
  '/dashboard/app.css': { path: join(here, 'app.css'), type: 'text/css; charset=utf-8' },
  '/dashboard/vendor/uPlot.iife.min.js': { path: join(uplotDist, 'uPlot.iife.min.js'), type: 'text/javascript; charset=utf-8' },
  '/dashboard/vendor/uPlot.min.css': { path: join(uplotDist, 'uPlot.min.css'), type: 'text/css; charset=utf-8' },
};

// Everything from our own origin; the page calls the API on the same origin.
const CSP =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

export const dashboardRoutes: FastifyPluginAsync = async (app) => {
  for (const [url, file] of Object.entries(FILES)) {
    const body = await readFile(file.path);
    app.get(url, { schema: { hide: true } }, async (_request, reply) =>
      reply
        .type(file.type)
        .header('content-security-policy', CSP)
        .header('x-content-type-options', 'nosniff')
        .header('cache-control', url === '/dashboard' ? 'no-cache' : 'public, max-age=300')
        .send(body),
    );
  }
};
