import type { FastifyError, FastifyPluginCallback, FastifyRequest } from 'fastify';
import type { Span } from '@opentelemetry/api';
import { ATTR_URL_PATH } from '@opentelemetry/semantic-conventions';
import fp from 'fastify-plugin';
import { AppError } from '../errors.ts';

/**
 * What a request's span keeps, for @fastify/otel's options. The path without its query string:
 * the instrumentation sets `url.path` to the whole URL, and a query may name a person
 * (`?email=`). Exceptions are recorded by `recordingServerErrorsOnly` below, not by it.
 */
export const requestSpanOptions = {
  recordExceptions: false,
  requestHook: (span: Span, request: FastifyRequest) => span.setAttribute(ATTR_URL_PATH, request.url.split('?')[0] ?? ''),
};

/** The status a failure is answered with: an AppError's own, a Fastify error's, else 500 (problems.ts maps them the same way). */
const statusOf = (error: FastifyError | Error): number =>
  error instanceof AppError ? error.status : 'statusCode' in error && typeof error.statusCode === 'number' ? error.statusCode : 500;

/**
 * The instrumentation's plugin, recording on the request's span the exceptions of server errors
 * only. A client error (4xx) is no fault of the service, and its message may quote what the
 * client sent; exported as an exception event it would carry that to the trace backend. The hook
 * is added before the instrumentation wraps `addHook`, so it gets no span of its own.
 */
export function recordingServerErrorsOnly(instrumentation: FastifyPluginCallback): FastifyPluginCallback {
  return fp(
    async (app) => {
      app.addHook('onError', async (request, _reply, error) => {
        if (statusOf(error) >= 500) request.opentelemetry().span?.recordException(error);
      });
      await app.register(instrumentation);
    },
    { name: 'request-spans' },
  );
}
