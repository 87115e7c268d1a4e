import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { dashboardRoutes } from '../../../services/dashboard/routes.ts';

/** The page's files as the browser fetches them: each module it imports is served, as JavaScript. */
describe('GET /dashboard and its files', () => {
  it('serves index.html, every module page.js imports (transitively), and the vendored uPlot, each with its content type', async () => {
    const app = Fastify();
    await app.register(dashboardRoutes);
    const get = (url: string) => app.inject({ method: 'GET', url });

    const page = await get('/dashboard');
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(page.body).toContain('<script type="module" src="/dashboard/page.js"></script>');

    const seen = new Set<string>();
    const pending = ['/dashboard/page.js'];
    for (let url = pending.pop(); url !== undefined; url = pending.pop()) {
      if (seen.has(url)) continue;
      seen.add(url);
      const module = await get(url);
      expect(module.statusCode, url).toBe(200);
      expect(module.headers['content-type'], url).toBe('text/javascript; charset=utf-8');
      expect(module.body.startsWith('// @ts-check'), url).toBe(true);
      for (const [, name] of module.body.matchAll(/^import .* from '\.\/([\w.]+)';$/gm)) pending.push(`/dashboard/${name}`);
    }
    expect([...seen].sort()).toEqual([
      '/dashboard/api.js',
      '/dashboard/charts.js',
      '/dashboard/format.js',
      '/dashboard/lines.js',
      '/dashboard/page.js',
      '/dashboard/reload.js',
      '/dashboard/workforce.js',
    ]);

    for (const [url, type] of [
      ['/dashboard/app.css', 'text/css; charset=utf-8'],
      ['/dashboard/vendor/uPlot.iife.min.js', 'text/javascript; charset=utf-8'],
      ['/dashboard/vendor/uPlot.min.css', 'text/css; charset=utf-8'],
    ] as const) {
      const file = await get(url);
      expect(file.statusCode, url).toBe(200);
      expect(file.headers['content-type'], url).toBe(type);
    }
    expect((await get('/dashboard/app.js')).statusCode).toBe(404);
    await app.close();
  });
});
