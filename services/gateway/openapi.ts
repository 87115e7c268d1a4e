import fastifySwagger from '@fastify/swagger';
import scalar from '@scalar/fastify-api-reference';
import type { FastifyPluginAsync } from 'fastify';
import fp from 'fastify-plugin';
import { jsonSchemaTransform, jsonSchemaTransformObject } from 'fastify-type-provider-zod';

/** OpenAPI 3.1 generated from the routes' zod schemas; served at /v1/openapi.json and /docs. */
export const openApiPlugin = fp(
  async (app) => {
    await app.register(fastifySwagger, {
      openapi: {
        openapi: '3.1.0',
        info: {
          title: 'Employee & Analytics Service',
          version: '1.0.0',
          description:
            'Multi-tenant, event-sourced employee management and KPI analytics. Every /v1 request carries `X-Tenant`; all but login and refresh carry `Authorization: Bearer <token>`. Errors are RFC 9457 problem details.',
        },
        components: {
          securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } },
        },
        security: [{ bearerAuth: [] }],
      },
      transform: jsonSchemaTransform,
      transformObject: jsonSchemaTransformObject,
    });
    await app.register(scalar, { routePrefix: '/docs', configuration: { url: '/v1/openapi.json' } });
  },
  { name: 'openapi' },
);

export const openApiRoutes: FastifyPluginAsync = async (v1) => {
  v1.get('/openapi.json', { schema: { hide: true } }, async () => v1.swagger());
};
