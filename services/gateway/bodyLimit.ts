import type { onRequestHookHandler } from 'fastify';
import { drainRefusedBody } from './drainRefusedBody.ts';
import { BODY_TOO_LARGE_DETAIL, sendProblem } from './problems.ts';

/**
 * Refuses a body that its Content-Length announces larger than `limitBytes` before any other
 * hook (authentication, rate limits) works for it, and reads the rest of it away before the
 * connection may close (drainRefusedBody.ts). A body without a length (chunked) is counted by
 * the body parser, whose 413 is drained the same way (problems.ts).
 */
export function refuseOversizedBody(limitBytes: number): onRequestHookHandler {
  return (request, reply, done) => {
    const length = request.headers['content-length'];
    if (length === undefined || Number(length) <= limitBytes) {
      done();
      return;
    }
    drainRefusedBody(request, reply);
    sendProblem(request, reply, 413, BODY_TOO_LARGE_DETAIL);
  };
}
