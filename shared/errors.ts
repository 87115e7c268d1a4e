/**
 * Errors that cross layers. The gateway's one error handler maps each `AppError` to an
 * RFC 9457 problem; anything else is a 500 whose details never leave the server.
 */
export type ProblemExtras = Record<string, unknown>;

export abstract class AppError extends Error {
  abstract readonly status: number;
  /** Short, stable slug: becomes the problem `type` (`/problems/<code>`). */
  abstract readonly code: string;
  abstract readonly title: string;
  readonly headers: Record<string, string> = {};
  readonly extras: ProblemExtras = {};
}

const defineError = (status: number, code: string, title: string) =>
  class extends AppError {
    readonly status = status;
    readonly code = code;
    readonly title = title;
    constructor(detail?: string, extras: ProblemExtras = {}, headers: Record<string, string> = {}) {
      super(detail ?? title);
      this.name = `${code}Error`;
      Object.assign(this.extras, extras);
      Object.assign(this.headers, headers);
    }
  };

export class BadRequestError extends defineError(400, 'bad-request', 'Bad Request') {}
export class UnauthorizedError extends defineError(401, 'unauthorized', 'Unauthorized') {}
export class ForbiddenError extends defineError(403, 'forbidden', 'Forbidden') {}
export class NotFoundError extends defineError(404, 'not-found', 'Not Found') {}
export class ConflictError extends defineError(409, 'conflict', 'Conflict') {}
/** The resource existed and was erased on purpose (a person's right to erasure): it will not come back. */
export class ErasedError extends defineError(410, 'erased', 'Erased') {}
export class PreconditionFailedError extends defineError(412, 'precondition-failed', 'Precondition Failed') {}
export class UnprocessableError extends defineError(422, 'unprocessable-content', 'Unprocessable Content') {}
export class TooManyRequestsError extends defineError(429, 'too-many-requests', 'Too Many Requests') {}
export class ServiceUnavailableError extends defineError(503, 'service-unavailable', 'Service Unavailable') {}

/** The event store refused an append because the stream is not at the expected revision. */
export class WrongExpectedRevisionError extends defineError(409, 'concurrency-conflict', 'Concurrency Conflict') {
  readonly streamId: string;
  readonly expected: string;
  readonly actual: number | 'no_stream';
  constructor(streamId: string, expected: string, actual: number | 'no_stream') {
    // The detail reaches clients: it must not carry internal stream ids (they embed the tenant id).
    super('The resource was changed by another request at the same time; read it again and retry');
    this.streamId = streamId;
    this.expected = expected;
    this.actual = actual;
  }
}
