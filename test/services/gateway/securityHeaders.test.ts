import type { FastifyInstance } from 'fastify';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jwksRoutes, type AuthDeps } from '../../../services/auth/plugin.ts';
import { dashboardRoutes } from '../../../services/dashboard/routes.ts';
import { createGateway } from '../../../services/gateway/app.ts';
import { authCapabilities, authHeaders, createTestAuth, provisionTenant } from '../../support/auth.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';

/**
 * The security headers of every response, over real HTTP: a listening gateway without
 * TRUST_PROXY, one trusting the loopback proxy and one trusting another address, since
 * Strict-Transport-Security depends on how the request arrived.
 */
let db: TestDatabase;
let auth: AuthDeps;
let direct: { app: FastifyInstance; url: string };
let proxied: { app: FastifyInstance; url: string };
let elsewhere: { app: FastifyInstance; url: string };
let headers: Record<string, string>;

async function gateway(trustProxy?: string) {
  const app = await createGateway({
    config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
    readiness: [],
    registry: new Registry(),
    v1: authCapabilities(auth),
    publicRoutes: [jwksRoutes(auth), dashboardRoutes],
    ...(trustProxy !== undefined && { trustProxy }),
  });
  return { app, url: await app.listen({ host: '127.0.0.1', port: 0 }) };
}

beforeAll(async () => {
  db = await createTestDatabase();
  auth = await createTestAuth(db.pool);
  direct = await gateway();
  proxied = await gateway('loopback');
  elsewhere = await gateway('10.0.0.1');
  headers = await authHeaders(auth, await provisionTenant(db.pool), 'admin');
}, 60_000);

afterAll(async () => {
  await direct?.app.close();
  await proxied?.app.close();
  await elsewhere?.app.close();
  await auth?.close();
  await db?.drop();
});

const API_CSP = "frame-ancestors 'none'";

describe('when a client calls the API', () => {
  it('answers every kind of response with nosniff, frame-ancestors none and DENY framing', async () => {
    const requests: Array<[string, RequestInit]> = [
      ['/v1/roles', { headers }], // 200
      ['/v1/roles', {}], // 401
      ['/v1/auth/login', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }], // 400
      ['/v1/nowhere', {}], // 404 from the not-found handler
      ['/v1/openapi.json', {}],
      ['/.well-known/jwks.json', {}],
      ['/health/live', {}],
    ];
    for (const [path, init] of requests) {
      const response = await fetch(`${direct.url}${path}`, init);
      await response.arrayBuffer();
      const seen = `${path} → ${response.status}`;
      expect(response.headers.get('x-content-type-options'), seen).toBe('nosniff');
      expect(response.headers.get('content-security-policy'), seen).toBe(API_CSP);
      expect(response.headers.get('x-frame-options'), seen).toBe('DENY');
      expect(response.headers.get('strict-transport-security'), seen).toBeNull();
    }
  });
});

describe('when the request came through a proxy that says it was HTTPS', () => {
  it('adds Strict-Transport-Security only when the proxy is trusted (TRUST_PROXY)', async () => {
    const https = { ...headers, 'x-forwarded-proto': 'https' };
    const trusted = await fetch(`${proxied.url}/v1/roles`, { headers: https });
    expect(trusted.status).toBe(200);
    expect(trusted.headers.get('strict-transport-security')).toBe('max-age=31536000');

    // A client that writes the header itself, to a gateway that trusts no proxy: no HSTS.
    const spoofed = await fetch(`${direct.url}/v1/roles`, { headers: https });
    expect(spoofed.status).toBe(200);
    expect(spoofed.headers.get('strict-transport-security')).toBeNull();

    // A gateway that trusts a proxy at another address, reached from loopback: the header is the
    // client's own, not a trusted proxy's.
    const untrustedPeer = await fetch(`${elsewhere.url}/v1/roles`, { headers: https });
    expect(untrustedPeer.status).toBe(200);
    expect(untrustedPeer.headers.get('strict-transport-security')).toBeNull();

    // Plain HTTP through the trusted proxy: none either.
    const plain = await fetch(`${proxied.url}/v1/roles`, { headers: { ...headers, 'x-forwarded-proto': 'http' } });
    expect(plain.headers.get('strict-transport-security')).toBeNull();
  });
});

describe('when a browser loads the two HTML pages', () => {
  it('keeps the dashboard’s own stricter policy', async () => {
    const page = await fetch(`${direct.url}/dashboard`);
    expect(page.status).toBe(200);
    await page.text();
    const csp = page.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("default-src 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(page.headers.get('x-content-type-options')).toBe('nosniff');
  });

  it('serves the API reference with a policy that leaves its inline scripts alone', async () => {
    const page = await fetch(`${direct.url}/docs`);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('<script');
    expect(page.headers.get('content-security-policy')).toBe(API_CSP);
  });
});
