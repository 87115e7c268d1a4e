import fastifySwagger from '@fastify/swagger';
import Fastify, { type FastifyInstance, type FastifyPluginAsync } from 'fastify';
import fp from 'fastify-plugin';

/**
 * The example slug of the API document: the `X-Tenant` parameter's example, and the value the
 * API reference page fills in, so "Try it" and the snippets agree.
 */
export const EXAMPLE_TENANT_SLUG = 'acme';

/** The placeholder Scalar hard-codes into every API-key value field: base64 text, not an example. */
const SCALAR_KEY_PLACEHOLDER = 'QUxMIFlPVVIgQkFTRSBBUkUgQkVMT05HIFRPIFVT';

/**
 * The X-Tenant scheme's value field, and no other API key or password field: Scalar lists a
 * scheme as a row it labels "<Scheme name>: <in>" (`tenant` below), then a Name row (the header's
 * name), then the Value row.
 */
const TENANT_FIELD = 'tr:has(> td[aria-label="Tenant: header"]) + tr + tr input';
import { commonResponsesPlugin, contractTransform, contractTransformObject } from './openApiContract.ts';

/**
 * The Scalar page's configuration. It must work on a machine without internet and must not send
 * the API's description anywhere: no web fonts from Scalar's CDN, no "Ask AI" agent, no MCP
 * generator, no developer-tools toolbar (its "Deploy"/"Share" actions talk to scalar.com), no
 * request proxy, no telemetry. "Try it" requests go straight to this service.
 *
 * The page declares its icon (none), or the browser asks for /favicon.ico and logs the 404. The
 * X-Tenant scheme is an API key to Scalar, whose value field has a fixed placeholder and is
 * masked like a secret: it starts with the example slug instead, shown in clear (a slug is no
 * secret), and the placeholder is hidden once the field is cleared.
 */
export const apiReferenceConfiguration = {
  url: '/v1/openapi.json',
  withDefaultFonts: false,
  telemetry: false,
  agent: { disabled: true },
  mcp: { disabled: true },
  showDeveloperTools: 'never',
  hideClientButton: true,
  documentDownloadType: 'json',
  customCss:
    '.darklight-reference a[href*="scalar.com"] { display: none; }\n' +
    `${TENANT_FIELD}.scalar-password-input { -webkit-text-security: none; text-security: none; }\n` +
    `${TENANT_FIELD}[placeholder="${SCALAR_KEY_PLACEHOLDER}"]::placeholder { color: transparent; }`,
  authentication: { securitySchemes: { tenant: { value: EXAMPLE_TENANT_SLUG } } },
  favicon: 'data:,',
} as const;

/**
 * The API reference at /docs, loaded on its first request: the Scalar plugin embeds a 4 MB
 * browser bundle and an OpenAPI parser (~40 MB RSS), which a gateway that nobody browses
 * should not carry. It runs in a private Fastify instance that this gateway forwards /docs to.
 */
const apiReferencePage: FastifyPluginAsync = async (app) => {
  let page: Promise<FastifyInstance> | undefined;
  const loadPage = async () => {
    const { default: scalar } = await import('@scalar/fastify-api-reference');
    const docs = Fastify({ logger: false });
    await docs.register(scalar, { routePrefix: '/docs', configuration: apiReferenceConfiguration });
    await docs.ready();
    return docs;
  };
  const forward = async (url: string) => {
    page ??= loadPage().catch((error: unknown) => {
      page = undefined;
      throw error;
    });
    return (await page).inject({ method: 'GET', url });
  };
  for (const url of ['/docs', '/docs/*']) {
    app.get(url, { schema: { hide: true } }, async (request, reply) => {
      const response = await forward(request.url);
      for (const name of ['content-type', 'location', 'cache-control']) {
        const value = response.headers[name];
        if (typeof value === 'string') reply.header(name, value);
      }
      return reply.code(response.statusCode).send(response.rawPayload);
    });
  }
};

/**
 * Relative: the origin that served the document, whichever deployment that is. `x-internal: false`
 * says the API is meant for integrators outside, which inventory tools ask every server to state.
 */
const thisDeployment = {
  url: '/',
  description: 'This deployment (production, staging or local): the origin serving this document',
  'x-internal': false,
};

export type OpenApiOptions = {
  /**
   * How the bearer scheme's tokens are issued and verified: the auth capability's to say, passed
   * in by the composition root (the gateway imports no capability).
   */
  readonly bearerAuthDescription?: string | undefined;
};

/** OpenAPI 3.1 generated from the routes' zod schemas; served at /v1/openapi.json and /docs. */
export const openApiPlugin = fp<OpenApiOptions>(
  async (app, options) => {
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
          securitySchemes: {
            bearerAuth: {
              type: 'http',
              scheme: 'bearer',
              bearerFormat: 'JWT',
              description: options.bearerAuthDescription ?? 'An access token from `POST /v1/auth/login` or `/v1/auth/refresh`.',
            },
            // Declared as a scheme rather than a parameter of each operation: like the token, a
            // client sets it once for every call (login and refresh declare it as a parameter).
            // The reference page finds its value field by this name (TENANT_FIELD above).
            tenant: {
              type: 'apiKey',
              in: 'header',
              name: 'X-Tenant',
              description:
                'Tenant slug, 1–63 lowercase letters, digits or inner hyphens. Missing or malformed → 400; another tenant than the token’s → 403.',
            },
          },
        },
        security: [{ bearerAuth: [], tenant: [] }],
        servers: [thisDeployment],
        tags: [
          { name: 'auth', description: 'Sign in, refresh and end sessions; the tenant’s roles' },
          { name: 'employees', description: 'Employees as event-sourced aggregates: hire, change, read, history, and the change feed' },
          { name: 'webhooks', description: 'Endpoints that receive the change feed as signed HTTP deliveries, and their delivery log' },
          { name: 'analytics', description: 'KPIs now and over time, and the billing events they are computed from' },
        ],
      },
      transform: contractTransform,
      transformObject: contractTransformObject,
    });
    await app.register(commonResponsesPlugin);
    await app.register(apiReferencePage);
  },
  { name: 'openapi' },
);

/**
 * The document is the same for every caller and changes only with a deploy: public, and cacheable
 * for five minutes, unlike the /v1 answers the scope marks no-store (a route-level onSend runs
 * after the scope's). Only its 200: a problem (a closing instance's 503) stays no-store.
 */
export const openApiRoutes: FastifyPluginAsync = async (v1) => {
  v1.get(
    '/openapi.json',
    {
      schema: { hide: true },
      onSend: (_request, reply, payload, done) => {
        if (reply.statusCode === 200) reply.header('cache-control', 'public, max-age=300');
        done(null, payload);
      },
    },
    async () => v1.swagger(),
  );
};
