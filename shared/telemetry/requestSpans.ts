import type { FastifyPluginCallback, FastifyRequest } from 'fastify';
import type { Span } from '@opentelemetry/api';
import { ATTR_URL_PATH } from '@opentelemetry/semantic-conventions';
import fp from 'fastify-plugin';

/**
 * What a request's span keeps, for @fastify/otel's options. The path without its query string:
 * the instrumentation sets `url.path` to the whole URL, and a query may name a person
 * (`?email=`). Exceptions are recorded by `recordingServerErrorsOnly` below, not by it.
 */
export const requestSpanOptions = {
  recordExceptions: false,
  requestHook: (span: Span, request: FastifyRequest) => span.setAttribute(ATTR_URL_PATH, request.url.split('?')[0] ?? ''),
};

/**
 * The instrumentation's plugin, recording on the request's span the exceptions of server errors
 * only. A client error (4xx) is no fault of the service, and its message may quote what the
 * client sent; exported as an exception event it would carry that to the trace backend. Which it
 * was is read from the status the error handler answered with, as `onSend` sees it before the
 * instrumentation's own route-level `onSend` ends the span: no second copy of that handler's
 * mapping here. The hooks are added before the instrumentation wraps `addHook`, so they get no
 * span of their own.
 */
export function recordingServerErrorsOnly(instrumentation: FastifyPluginCallback): FastifyPluginCallback {
  return fp(
    async (app) => {
      const failures = new WeakMap<FastifyRequest, Error>();
      app.addHook('onError', async (request, _reply, error) => {
        failures.set(request, error);
      });
      app.addHook('onSend', async (request, reply, payload) => {
        const error = failures.get(request);
        if (error !== undefined && reply.statusCode >= 500) request.opentelemetry().span?.recordException(error);
        return payload;
      });
      await app.register(instrumentation);
    },
    { name: 'request-spans' },
  );
}
