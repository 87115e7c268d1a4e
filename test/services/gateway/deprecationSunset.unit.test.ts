import type { FastifyInstance } from 'fastify';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGateway, type V1Capability } from '../../../services/gateway/app.ts';

/**
 * Regression: docs/versioning.md promises that a deprecated endpoint is marked `deprecated: true`
 * in GET /v1/openapi.json and answers `410 Gone` (a problem) after its Sunset date; the gateway
 * only set the Deprecation/Sunset/Link headers.
 */
const routes: V1Capability = async (v1) => {
  v1.get(
    '/probe/deprecated',
    { config: { deprecation: { since: new Date('2026-01-01T00:00:00Z'), sunset: new Date('2999-12-31T00:00:00Z'), link: '/docs' } } },
    async () => ({ ok: true }),
  );
  v1.get(
    '/probe/sunset',
    { config: { deprecation: { since: new Date('2020-01-01T00:00:00Z'), sunset: new Date('2020-07-01T00:00:00Z'), link: '/docs' } } },
    async () => ({ ok: true }),
  );
  v1.get('/probe/current', async () => ({ ok: true }));
};

let app: FastifyInstance;

beforeAll(async () => {
  app = await createGateway({
    config: { BODY_LIMIT_BYTES: 1024, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
    readiness: [],
    registry: new Registry(),
    v1: [routes],
  });
});

afterAll(async () => {
  await app?.close();
});

describe('when an endpoint is deprecated', () => {
  it('is marked deprecated: true in the OpenAPI document (and only it)', async () => {
    const doc = (await app.inject({ url: '/v1/openapi.json' })).json<{ paths: Record<string, { get: { deprecated?: boolean } }> }>();
    expect(doc.paths['/v1/probe/deprecated']?.get.deprecated).toBe(true);
    expect(doc.paths['/v1/probe/sunset']?.get.deprecated).toBe(true);
    expect(doc.paths['/v1/probe/current']?.get.deprecated).toBeUndefined();
  });

  it('before its sunset it works and announces itself', async () => {
    const response = await app.inject({ url: '/v1/probe/deprecated' });
    expect(response.statusCode).toBe(200);
    expect(response.headers.sunset).toBe('Tue, 31 Dec 2999 00:00:00 GMT');
  });

  it('after its sunset it answers 410 Gone as a problem, still with the headers', async () => {
    const response = await app.inject({ url: '/v1/probe/sunset' });
    expect(response.statusCode).toBe(410);
    expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(response.json()).toMatchObject({ type: '/problems/gone', title: 'Gone', status: 410, instance: '/v1/probe/sunset' });
    expect(response.headers.deprecation).toBe('@1577836800');
    expect(response.headers.sunset).toBe('Wed, 01 Jul 2020 00:00:00 GMT');
    expect(response.headers.link).toBe('</docs>; rel="deprecation"');
  });
});
