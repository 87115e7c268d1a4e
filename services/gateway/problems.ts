import { randomUUID } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { hasZodFastifySchemaValidationErrors, isResponseSerializationError } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { BackendTerminatedError, BackendTerminatedUnexpectedlyError, ConnectionError } from 'slonik';
import { sqlStateOf } from '../../shared/db/sqlState.ts';
import { AppError } from '../../shared/errors.ts';

/** RFC 9457 problem details, the body of every error response. */
export const problemSchema = z
  .object({
    type: z.string().describe('URI reference naming the problem type'),
    title: z.string(),
    status: z.number().int(),
    detail: z.string(),
    instance: z.string().describe('The request path'),
    requestId: z.string().optional(),
    errors: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
  })
  .catchall(z.unknown())
  .meta({ id: 'Problem' });

export type Problem = z.infer<typeof problemSchema>;

export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

const problemType = (code: string) => `/problems/${code}`;

const TITLES: Record<number, [code: string, title: string]> = {
  400: ['bad-request', 'Bad Request'],
  401: ['unauthorized', 'Unauthorized'],
  403: ['forbidden', 'Forbidden'],
  404: ['not-found', 'Not Found'],
  405: ['method-not-allowed', 'Method Not Allowed'],
  406: ['not-acceptable', 'Not Acceptable'],
  409: ['conflict', 'Conflict'],
  410: ['gone', 'Gone'],
  412: ['precondition-failed', 'Precondition Failed'],
  413: ['content-too-large', 'Content Too Large'],
  414: ['uri-too-long', 'URI Too Long'],
  415: ['unsupported-media-type', 'Unsupported Media Type'],
  408: ['request-timeout', 'Request Timeout'],
  431: ['request-header-fields-too-large', 'Request Header Fields Too Large'],
  422: ['unprocessable-content', 'Unprocessable Content'],
  429: ['too-many-requests', 'Too Many Requests'],
  500: ['internal', 'Internal Server Error'],
  503: ['service-unavailable', 'Service Unavailable'],
};

/** The RFC 9457 body for `status` (its type and title from TITLES unless given). */
function problemBody(
  status: number,
  detail: string,
  instance: string,
  requestId: string,
  extras: Record<string, unknown> = {},
  code?: string,
  title?: string,
): Problem {
  const [defaultCode, defaultTitle] = TITLES[status] ?? (status >= 500 ? TITLES[500] : TITLES[400]) ?? ['error', 'Error'];
  return { type: problemType(code ?? defaultCode), title: title ?? defaultTitle, status, detail, instance, requestId, ...extras };
}

export function sendProblem(
  request: FastifyRequest,
  reply: FastifyReply,
  status: number,
  detail: string,
  extras: Record<string, unknown> = {},
  code?: string,
  title?: string,
): FastifyReply {
  const body = problemBody(status, detail, request.url.split('?')[0] ?? request.url, request.id, extras, code, title);
  // Also for failures before the onRequest hooks ran (router errors): the id is always echoed.
  if (!reply.hasHeader('x-request-id')) reply.header('x-request-id', request.id);
  // A read sets X-Consistency once its wait for X-Min-Position ends, before it reads: when the
  // read then fails, the problem says nothing of a read model's state (declared on successes only).
  reply.removeHeader('x-consistency');
  return reply.code(status).type(PROBLEM_CONTENT_TYPE).serializer(JSON.stringify).send(body);
}

export const BODY_TOO_LARGE_DETAIL = 'The request body is larger than this service accepts';

const FASTIFY_CODES: Record<string, [status: number, detail: string]> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: [415, 'This endpoint accepts application/json request bodies'],
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: [400, 'Content-Length does not match the body'],
  FST_ERR_CTP_EMPTY_JSON_BODY: [400, 'The request body is empty but Content-Type is application/json'],
  FST_ERR_CTP_INVALID_JSON_BODY: [400, 'The request body is not valid JSON'],
  FST_ERR_CTP_BODY_TOO_LARGE: [413, BODY_TOO_LARGE_DETAIL],
  FST_ERR_CTP_INVALID_TYPE: [400, 'The Content-Type header is not valid'],
};

/** One error handler for the whole app: domain errors to problems, internals hidden. */
export function handleError(error: FastifyError | Error, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  if (error instanceof AppError) {
    // An adapter that turned a dependency's failure into a 503 (e.g. Kafka unreachable) keeps the
    // original as `cause`: the client gets the problem, the log gets what happened.
    if (error.status >= 500 && error.cause !== undefined) request.log.error({ err: error.cause }, 'dependency unavailable');
    reply.headers(error.headers);
    // RFC 9110: every 401 names its scheme.
    if (error.status === 401 && !reply.hasHeader('www-authenticate')) reply.header('www-authenticate', 'Bearer realm="employee-analytics"');
    return sendProblem(request, reply, error.status, error.message, error.extras, error.code, error.title);
  }
  if (hasZodFastifySchemaValidationErrors(error)) {
    const errors = error.validation.map((v) => ({
      path: [
        error.validationContext ?? '',
        ...String(v.instancePath ?? '')
          .split('/')
          .filter(Boolean),
      ]
        .filter(Boolean)
        .join('.'),
      message: v.message ?? 'is invalid',
    }));
    return sendProblem(request, reply, 400, `The request ${error.validationContext ?? 'input'} is invalid`, { errors });
  }
  const code = 'code' in error ? String(error.code) : '';
  if (code === 'FST_ERR_CTP_INVALID_JSON_BODY' || (error instanceof SyntaxError && 'statusCode' in error)) {
    return sendProblem(request, reply, 400, 'The request body is not valid JSON');
  }
  const known = FASTIFY_CODES[code];
  if (known) return sendProblem(request, reply, known[0], known[1]);
  const statusCode = 'statusCode' in error && typeof error.statusCode === 'number' ? error.statusCode : 500;
  if (statusCode >= 400 && statusCode < 500 && !isResponseSerializationError(error)) {
    return sendProblem(request, reply, statusCode, error.message);
  }
  if (isReadModelMissing(error)) {
    // A gateway that starts before any projector built the read model (a first deploy, a
    // fresh database): not ready yet rather than broken. Found by the OpenAPI fuzz test.
    request.log.error({ err: error }, 'read model not built yet');
    reply.header('retry-after', '5');
    return sendProblem(request, reply, 503, 'The read model for this request is not built yet; retry shortly');
  }
  if (isDependencyDown(error)) {
    request.log.error({ err: error }, 'dependency unavailable');
    reply.header('retry-after', '5');
    return sendProblem(request, reply, 503, 'A service this request depends on is unavailable; retry shortly');
  }
  request.log.error({ err: error }, 'request failed');
  return sendProblem(request, reply, 500, `An internal error occurred; quote request id ${request.id} when reporting it`);
}

/**
 * PostgreSQL (or another dependency) unreachable, restarting or full: a 503, not a 500. With
 * SQLSTATE class 08 (connection exception), which the event store's own connections report when
 * one is lost mid-flush.
 */
const UNAVAILABLE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', '57P01', '57P02', '57P03', '53300']);

/** PostgreSQL `undefined_table`: a read model whose projector has not created it yet. */
function isReadModelMissing(error: unknown): boolean {
  return sqlStateOf(error) === '42P01';
}

function isDependencyDown(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (e instanceof ConnectionError || e instanceof BackendTerminatedError || e instanceof BackendTerminatedUnexpectedlyError) return true;
    if ('code' in e && (UNAVAILABLE_CODES.has(String(e.code)) || String(e.code).startsWith('08'))) return true;
    if (e.name === 'UnavailableError') return true; // KurrentDB / EventStoreDB client
  }
  return false;
}

/** Node's HTTP parser errors, by code; anything else it refuses is a 400. */
const CLIENT_ERRORS: Record<string, [status: number, detail: string]> = {
  HPE_HEADER_OVERFLOW: [431, 'The request headers are larger than this service accepts'],
  ERR_HTTP_REQUEST_TIMEOUT: [408, 'The request was not received in time'],
};

/** The request target's path, when the refused bytes start with a readable request line. */
function targetPath(rawPacket: unknown): string {
  const head = Buffer.isBuffer(rawPacket) ? rawPacket.subarray(0, 2_100).toString('latin1') : '';
  return /^[A-Z]{3,10} (\/[\x21-\x3e\x40-\x7e]{0,2048})[ ?#\r]/.exec(head)?.[1] ?? '/';
}

/**
 * Fastify's `clientErrorHandler`: requests Node's HTTP parser refuses before Fastify sees them
 * (headers over `maxHeaderSize` → 431, a malformed request line or header → 400, a request not
 * complete within `requestTimeout` → 408). They get the same RFC 9457 problem as every other
 * error (Fastify's default writes its own `application/json` shape). There is no request object,
 * so the response is written on the socket, which is then closed: the parser's state is lost.
 */
export function handleClientError(error: Error & { code?: string; rawPacket?: unknown }, socket: Socket): void {
  // A reset connection, or one already gone: nobody to answer.
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  // Not writable, or a response on this socket has already begun (a bad chunked body after an
  // early 401/429, a pipelined request behind a streaming answer): bytes of ours would corrupt
  // its framing, so the connection is only closed, as Node's own handler does.
  const inFlight: unknown = Reflect.get(socket, '_httpMessage');
  const started = typeof inFlight === 'object' && inFlight !== null && Reflect.get(inFlight, 'headersSent') === true;
  if (!socket.writable || started) {
    socket.destroy();
    return;
  }
  const [status, detail] = CLIENT_ERRORS[error.code ?? ''] ?? [400, 'The request is not valid HTTP/1.1'];
  const requestId = randomUUID();
  const problem = problemBody(status, detail, targetPath(error.rawPacket), requestId);
  const body = JSON.stringify(problem);
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? problem.title}\r\n` +
      `Content-Type: ${PROBLEM_CONTENT_TYPE}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
      `X-Request-Id: ${requestId}\r\nConnection: close\r\n\r\n${body}`,
    () => socket.destroy(),
  );
}
