import { describe, expect, it } from 'vitest';
import { authHeaders } from '../../support/auth.ts';
import { expectProblem } from '../../support/harness/employees.ts';
import { useWebhooks } from '../../support/harness/webhooks.ts';

/** Registering webhook endpoints: target checks, URL validation, the document and permissions. */
const wh = useWebhooks();
const { admin } = wh;

describe('when a target is loopback, private, link-local or metadata and not allow-listed', () => {
  it('refuses to register it (422), after resolving names', async () => {
    const { headers } = await admin();
    for (const url of [
      'https://127.0.0.1/hook',
      'https://10.1.2.3/hook',
      'https://169.254.169.254/latest/meta-data',
      'https://[::1]/hook',
      'https://localhost/hook',
      'http://example.com/hook',
      'ftp://example.com/hook',
      'https://user:pw@example.com/hook',
    ]) {
      const response = await wh.strictApp.inject({
        method: 'POST',
        url: '/v1/webhooks',
        headers,
        payload: { url, events: ['employee.hired'] },
      });
      expectProblem(response, 422);
    }
  });

  it('says a name is refused without saying which address it points at', async () => {
    const { headers } = await admin();
    const response = await wh.strictApp.inject({
      method: 'POST',
      url: '/v1/webhooks',
      headers,
      payload: { url: 'https://localhost/hook', events: ['employee.hired'] },
    });
    expectProblem(response, 422);
    expect(response.body).toMatch(/localhost/);
    expect(response.body).not.toMatch(/127\.0\.0\.1|::1\b/);
  });

  it('refuses a NUL or lone surrogate in the URL with a 400 naming it, never a 500', async () => {
    const { headers } = await admin();
    for (const url of ['http://127.0.0.1:9/a\u0000b', 'http://127.0.0.1:9/a\ud800']) {
      const response = await wh.h.app.inject({
        method: 'POST',
        url: '/v1/webhooks',
        headers,
        payload: { url, events: ['employee.hired'] },
      });
      const problem = expectProblem(response, 400);
      expect(problem.errors).toEqual(expect.arrayContaining([expect.objectContaining({ path: 'body.url' })]));
    }
  });

  it('stores a URL as normalised (percent-encoded by the URL parser)', async () => {
    const { headers } = await admin();
    const response = await wh.h.app.inject({
      method: 'POST',
      url: '/v1/webhooks',
      headers,
      payload: { url: 'http://127.0.0.1:9/a b/é', events: ['employee.hired'] },
    });
    expect(response.statusCode).toBe(201);
    expect(response.json<{ url: string }>().url).toBe('http://127.0.0.1:9/a%20b/%C3%A9');
  });

  it('is described in the OpenAPI document', async () => {
    const doc = (await wh.h.app.inject({ method: 'GET', url: '/v1/openapi.json' })).json<{ paths: Record<string, unknown> }>();
    for (const path of [
      '/v1/employees/changes',
      '/v1/webhooks',
      '/v1/webhooks/{id}',
      '/v1/webhooks/{id}/deliveries',
      '/v1/webhooks/{id}/replay',
    ]) {
      expect(Object.keys(doc.paths)).toContain(path);
    }
  });

  it('needs webhooks:manage (admin)', async () => {
    const { tenant } = await wh.h.tenant();
    const hr = await authHeaders(wh.h.auth, tenant, 'hr_manager');
    expectProblem(await wh.h.app.inject({ method: 'GET', url: '/v1/webhooks', headers: hr }), 403);
  });
});
