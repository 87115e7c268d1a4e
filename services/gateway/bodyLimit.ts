import type { onRequestHookHandler } from 'fastify';
import { BODY_TOO_LARGE_DETAIL, sendProblem } from './problems.ts';

/**
 * Refuses a body that its Content-Length announces larger than `limitBytes` before any other
 * hook (authentication, rate limits) works for it; the rest of it is read away before the
 * connection may close, as for every answer sent before its body was read (drainRefusedBody.ts).
 * A body without a length (chunked) is counted by the body parser, whose 413 is drained the same way.
 */
export function refuseOversizedBody(limitBytes: number): onRequestHookHandler {
  return (request, reply, done) => {
    const length = request.headers['content-length'];
    if (length === undefined || Number(length) <= limitBytes) {
      done();
      return;
    }
    sendProblem(request, reply, 413, BODY_TOO_LARGE_DETAIL);
  };
}
