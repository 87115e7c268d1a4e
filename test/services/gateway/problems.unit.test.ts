import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ConflictError, UnauthorizedError } from '../../../shared/errors.ts';
import { createGateway } from '../../../services/gateway/app.ts';

/**
 * The gateway skeleton on its own: every error is an RFC 9457 problem, never a 500 for a
 * client's mistake, never internals in a 500. The capability here is a fixture route with a
 * body schema, so content-type, size and JSON errors can be provoked independently of features.
 */
const probe = async (v1: FastifyInstance) => {
  const typed = v1.withTypeProvider<ZodTypeProvider>();
  typed.post(
    '/probe',
    {
      schema: {
        body: z.object({ name: z.string().min(1), count: z.number().int().min(0) }),
        response: { 200: z.object({ name: z.string(), count: z.number() }) },
      },
    },
    async (request) => request.body,
  );
  typed.get(
    '/probe/old',
    { config: { deprecation: { since: new Date('2026-01-01T00:00:00Z'), sunset: new Date('2026-12-31T00:00:00Z'), link: '/docs' } } },
    async () => ({ ok: true }),
  );
  typed.get('/probe/conflict', async () => {
    throw new ConflictError('That already exists', { conflictingId: 'abc' });
  });
  typed.get('/probe/:id', { schema: { params: z.object({ id: z.string() }) } }, async (request) => ({ id: request.params.id }));
  typed.get('/probe/unauthorized', async () => {
    throw new UnauthorizedError('No session');
  });
  typed.get('/probe/crash', async () => {
    throw new Error('relation "secret_table" does not exist at /srv/app/db.ts:42');
  });
};

describe('gateway skeleton', () => {
  let app: FastifyInstance;
  let ready = true;
  let optionalUp = true;

  beforeAll(async () => {
    app = await createGateway({
      config: { BODY_LIMIT_BYTES: 1024, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
      readiness: [
        { name: 'fixture', check: async () => void (ready || (await Promise.reject(new Error('down')))) },
        { name: 'optional', critical: false, check: async () => void (optionalUp || (await Promise.reject(new Error('down')))) },
      ],
      registry: new Registry(),
      v1: [probe],
    });
  });
  afterAll(async () => {
    await app.close();
  });

  const expectProblem = (response: { headers: Record<string, unknown>; json(): Record<string, unknown> }, status: number) => {
    expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
    const body = response.json();
    expect(body).toMatchObject({
      status,
      type: expect.stringMatching(/^\/problems\//),
      title: expect.any(String),
      detail: expect.any(String),
    });
    expect(body.instance).toEqual(expect.stringMatching(/^\//));
    expect(response.headers['x-request-id']).toBe(body.requestId);
    return body;
  };

  describe('when the route or version is unknown', () => {
    it.each(['/v1/nothing-here', '/v2/employees', '/', '/v1'])('answers 404 problem for %s', async (url) => {
      const response = await app.inject({ method: 'GET', url });
      expect(response.statusCode).toBe(404);
      expectProblem(response, 404);
    });
  });

  describe('when the body is wrong', () => {
    it('answers 400 for malformed JSON', async () => {
      const response = await app.inject({
        method: 'POST',
        url: '/v1/probe',
        headers: { 'content-type': 'application/json' },
        payload: '{"name": ',
      });
      expect(response.statusCode).toBe(400);
      expectProblem(response, 400);
    });

    it('answers 413 for a body over the limit', async () => {
      const payload = JSON.stringify({ name: 'x'.repeat(4096), count: 1 });
      const response = await app.inject({ method: 'POST', url: '/v1/probe', headers: { 'content-type': 'application/json' }, payload });
      expect(response.statusCode).toBe(413);
      expectProblem(response, 413);
    });

    it('answers 415 for a content type other than JSON', async () => {
      const response = await app.inject({ method: 'POST', url: '/v1/probe', headers: { 'content-type': 'text/plain' }, payload: 'name=x' });
      expect(response.statusCode).toBe(415);
      expectProblem(response, 415);
    });

    it('answers 400 with each invalid field for a schema violation', async () => {
      const response = await app.inject({ method: 'POST', url: '/v1/probe', payload: { name: '', count: -1, extra: true } });
      expect(response.statusCode).toBe(400);
      const body = expectProblem(response, 400);
      expect(body.errors).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ path: 'body.name', message: expect.any(String) }),
          expect.objectContaining({ path: 'body.count', message: expect.any(String) }),
        ]),
      );
    });

    it('accepts +json media types such as merge-patch+json', async () => {
      const response = await app.inject({
        method: 'POST',
        url: '/v1/probe',
        headers: { 'content-type': 'application/merge-patch+json' },
        payload: JSON.stringify({ name: 'b', count: 3 }),
      });
      expect(response.statusCode).toBe(200);
    });

    it('accepts a valid body', async () => {
      const response = await app.inject({ method: 'POST', url: '/v1/probe', payload: { name: 'a', count: 2 } });
      expect(response.statusCode).toBe(200);
      expect(response.json()).toEqual({ name: 'a', count: 2 });
    });
  });

  describe('when the URL itself is broken', () => {
    it('answers a 400 problem for malformed percent-encoding, not the framework default', async () => {
      const response = await app.inject({ method: 'GET', url: '/v1/probe/%E0%A4%A' });
      expect(response.statusCode).toBe(400);
      expectProblem(response, 400);
    });
  });

  describe('when a handler fails', () => {
    it('names the Bearer scheme on every 401', async () => {
      const response = await app.inject({ method: 'GET', url: '/v1/probe/unauthorized' });
      expect(response.statusCode).toBe(401);
      expect(response.headers['www-authenticate']).toMatch(/^Bearer/);
      expectProblem(response, 401);
    });

    it('maps a domain error to its problem with its extension members', async () => {
      const response = await app.inject({ method: 'GET', url: '/v1/probe/conflict' });
      expect(response.statusCode).toBe(409);
      expect(expectProblem(response, 409)).toMatchObject({ detail: 'That already exists', conflictingId: 'abc' });
    });

    it('hides the internals of an unexpected error behind a request id', async () => {
      const response = await app.inject({ method: 'GET', url: '/v1/probe/crash', headers: { 'x-request-id': 'req-123' } });
      expect(response.statusCode).toBe(500);
      const body = expectProblem(response, 500);
      expect(body.requestId).toBe('req-123');
      expect(response.body).not.toMatch(/secret_table|db\.ts|stack/);
    });
  });

  describe('when a route is deprecated', () => {
    it('announces it with Deprecation (RFC 9745) and Sunset (RFC 8594)', async () => {
      const response = await app.inject({ url: '/v1/probe/old' });
      expect(response.headers.deprecation).toBe('@1767225600');
      expect(response.headers.sunset).toBe('Thu, 31 Dec 2026 00:00:00 GMT');
      expect(response.headers.link).toBe('</docs>; rel="deprecation"');
      expect((await app.inject({ url: '/health/live' })).headers.deprecation).toBeUndefined();
    });
  });

  describe('operational endpoints', () => {
    it('reports liveness, readiness per dependency, and Prometheus metrics', async () => {
      expect((await app.inject({ url: '/health/live' })).json()).toEqual({ status: 'ok' });
      ready = true;
      expect((await app.inject({ url: '/health/ready' })).json()).toEqual({
        status: 'ready',
        checks: { fixture: { status: 'up' }, optional: { status: 'up' } },
      });
      optionalUp = false;
      const degraded = await app.inject({ url: '/health/ready' });
      expect(degraded.statusCode).toBe(200);
      expect(degraded.json()).toMatchObject({ status: 'degraded', checks: { optional: { status: 'down' } } });
      optionalUp = true;
      ready = false;
      const down = await app.inject({ url: '/health/ready' });
      expect(down.statusCode).toBe(503);
      expect(down.headers['retry-after']).toBe('5');
      expectProblem(down, 503);
      ready = true;
      const metrics = await app.inject({ url: '/metrics' });
      expect(metrics.body).toContain('http_request_duration_seconds');
    });

    it('serves the OpenAPI 3.1 document generated from the route schemas, and a docs page', async () => {
      const doc = (await app.inject({ url: '/v1/openapi.json' })).json();
      expect(doc.openapi).toBe('3.1.0');
      expect(doc.paths['/v1/probe'].post.requestBody.content['application/json'].schema.properties).toHaveProperty('count');
      const docs = await app.inject({ url: '/docs' });
      expect(docs.statusCode).toBeLessThan(400);
    });
  });
});
