import { randomUUID } from 'node:crypto';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyPluginAsync, type FastifyPluginCallback } from 'fastify';
import { serializerCompiler, validatorCompiler, type ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Registry } from 'prom-client';
import type { Config } from '../../shared/config.ts';
import { createLogger, lazyChild, type Logger } from '../../shared/logger.ts';
import { handleClientError, handleError, sendProblem } from './problems.ts';
import { healthRoutes, type ReadinessCheck } from './health.ts';
import { openApiPlugin, openApiRoutes } from './openapi.ts';
import { httpMetricsPlugin } from './httpMetrics.ts';
import { deprecationPlugin } from './deprecation.ts';
import { refuseOversizedBody } from './bodyLimit.ts';
import { drainUnreadBody } from './drainRefusedBody.ts';
import { securityHeadersPlugin } from './securityHeaders.ts';

export type GatewayOptions = {
  readonly config: Pick<Config, 'BODY_LIMIT_BYTES' | 'LOG_LEVEL' | 'NODE_ENV'>;
  readonly readiness: readonly ReadinessCheck[];
  readonly registry: Registry;
  /** Capability plugins mounted under `/v1`, each with its ports already bound. */
  readonly v1: readonly V1Capability[];
  /** Public routes outside /v1 (e.g. /.well-known/jwks.json), each in its own context. */
  readonly publicRoutes?: readonly FastifyPluginAsync[];
  /** The process's pino logger; without one the gateway makes its own at LOG_LEVEL. */
  readonly logger?: FastifyBaseLogger;
  /**
   * OpenTelemetry's Fastify instrumentation, when tracing is on: registered before every hook
   * that works for a request and before every route.
   */
  readonly tracing?: FastifyPluginCallback;
  /**
   * Fastify `trustProxy` (config TRUST_PROXY): whose X-Forwarded-For gives `request.ip`. A hop
   * count or proxy addresses only: `true` would let a client choose its own address.
   */
  readonly trustProxy?: number | string | false | undefined;
  /** The OpenAPI document's description of the bearer scheme (from the auth capability, via the composition root). */
  readonly bearerAuthDescription?: string;
};

export type V1Capability = (v1: FastifyInstance) => Promise<void>;

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * Aborted when the gateway starts to close (SIGTERM): a handler that waits on purpose (a
     * long-poll) listens to it and answers at once with what it has, so the drain is bounded by
     * the slowest real work rather than by the longest `?wait=` (`request.server.shutdownSignal`).
     */
    readonly shutdownSignal: AbortSignal;
  }
}

/**
 * Fastify turns a numeric `trustProxy` into "trust nobody", so a hop count becomes the function
 * proxy-addr calls with each address's distance from the socket (0 = the socket's peer): the
 * `hops` nearest are proxies, and the address before them is the client's.
 */
const trustedProxies = (trust: number | string | false) =>
  typeof trust === 'number' ? (_address: string, distance: number) => distance < trust : trust;

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * Builds the gateway. Plugins load in tiers: infrastructure (errors, metrics, OpenAPI), then
 * public routes (health, docs), then the `/v1` capabilities, which receive their ports
 * through their own closures rather than globals. `server.ts` only listens.
 */
export async function createGateway(options: GatewayOptions): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: options.logger ?? createLogger({ LOG_LEVEL: options.config.LOG_LEVEL, LOG_FORMAT: 'json' }, 'gateway'),
    bodyLimit: options.config.BODY_LIMIT_BYTES,
    ...(options.trustProxy !== undefined && { trustProxy: trustedProxies(options.trustProxy) }),
    // Request loggers bind lazily (the request id here, tenant and user in auth): pino would
    // serialise both bindings on every request, whether or not a line is written.
    childLoggerFactory: (logger, bindings, options) =>
      Object.keys(options).length > 0 ? logger.child(bindings, options) : (lazyChild(logger as Logger, bindings) as FastifyBaseLogger),
    genReqId: (req) => {
      const incoming = req.headers['x-request-id'];
      return typeof incoming === 'string' && REQUEST_ID.test(incoming) ? incoming : randomUUID();
    },
    // While closing, requests get our own 503 problem with Retry-After (hook below).
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 200 },
    // Router-level failures (malformed URL encoding, over-long parameters) are problems too.
    frameworkErrors: (error, request, reply) => handleError(error, request, reply),
    // And so are the requests Node's HTTP parser refuses (431, 400, 408), answered on the socket.
    clientErrorHandler: handleClientError,
  }).withTypeProvider<ZodTypeProvider>();

  // A JSON API: application/json and +json bodies (e.g. merge-patch+json); anything else is 415.
  app.removeContentTypeParser('text/plain');
  app.addContentTypeParser(/^application\/[\w.-]+\+json$/, { parseAs: 'string' }, app.getDefaultJsonParser('error', 'error'));
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  app.setErrorHandler(handleError);
  app.setNotFoundHandler((request, reply) =>
    sendProblem(request, reply, 404, `No route ${request.method} ${request.url.split('?')[0]}; this service serves /v1`),
  );
  // Before the hooks below, so that even the 503 of a closing instance carries them.
  await app.register(securityHeadersPlugin);
  const shutdown = new AbortController();
  app.decorate('shutdownSignal', shutdown.signal);
  const startClosing = async () => shutdown.abort();
  app.addHook('onClose', startClosing);
  app.addHook('preClose', startClosing);
  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id);
    if (shutdown.signal.aborted) {
      reply.header('retry-after', '1').header('connection', 'close');
      return sendProblem(request, reply, 503, 'This instance is shutting down; retry (another instance will answer)');
    }
  });
  // A request in flight when closing starts ends its connection with its answer: Node's
  // server.close() closes only the connections idle at that moment, so a keep-alive client would
  // otherwise hold the drain open until its keep-alive timeout (72 s) and the shutdown timer's exit 1.
  // (Callback style: on every response, an async hook would cost a promise per request.)
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (shutdown.signal.aborted) reply.header('connection', 'close');
    done(null, payload);
  });

  // Tier 1: infrastructure (tracing first, so every later hook and route is inside the request's span).
  if (options.tracing) await app.register(options.tracing);
  // Before every other hook that works for a request (authentication, rate limits), and in its span.
  app.addHook('onRequest', refuseOversizedBody(options.config.BODY_LIMIT_BYTES));
  app.addHook('onSend', drainUnreadBody);
  await app.register(httpMetricsPlugin, { registry: options.registry });
  await app.register(openApiPlugin, { bearerAuthDescription: options.bearerAuthDescription });
  await app.register(deprecationPlugin);

  // Tier 2: public, unversioned routes.
  await app.register(healthRoutes, { readiness: options.readiness, registry: options.registry });
  for (const routes of options.publicRoutes ?? []) await app.register(routes);

  // Tier 3: the versioned API.
  await app.register(
    async (v1) => {
      // API answers are per tenant and caller (tokens among them): no cache may keep one. In
      // onSend, so that the early answers have it too (a closing instance's 503). The one
      // exception, the public OpenAPI document, overrides it in its own route.
      v1.addHook('onSend', (_request, reply, payload, done) => {
        reply.header('cache-control', 'no-store');
        done(null, payload);
      });
      await v1.register(openApiRoutes);
      for (const capability of options.v1) await capability(v1);
    },
    { prefix: '/v1' },
  );

  await app.ready();
  return app;
}
