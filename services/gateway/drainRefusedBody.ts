import type { FastifyReply, FastifyRequest } from 'fastify';

/** What a refused request may still send us before its connection is closed, in bytes and time. */
export const DRAIN_LIMIT = { bytes: 16 * 1_048_576, ms: 5_000 } as const;

/**
 * Reads and discards the rest of a refused request's body, so that its connection is closed
 * only after the client has had the answer. Closing a socket with unread data makes the kernel
 * send a reset, which a client still writing its body (Node's fetch) reports as EPIPE instead of
 * the response it had been sent; RFC 9112 §9.6 asks servers to close in stages for this reason.
 * The answer keeps the connection open (with `Connection: close` Node would close it as soon as
 * the answer is written); once the body has been read, the connection serves the next request.
 * A body that goes on past `DRAIN_LIMIT` ends the connection, so a refused client costs at most
 * that much bandwidth and time, and no memory.
 */
export function drainRefusedBody(request: FastifyRequest, reply: FastifyReply, limit = DRAIN_LIMIT): void {
  const incoming = request.raw;
  reply.removeHeader('connection');
  if (incoming.complete) return;
  const socket = incoming.socket;
  let drained = 0;
  const stop = () => socket.destroy();
  const timer = setTimeout(stop, limit.ms).unref();
  // A gateway that starts closing waits for every connection still receiving a request: this
  // one ends once its answer is out rather than holding the drain for its bound.
  const shutdown = request.server.shutdownSignal;
  const onShutdown = () => (reply.raw.writableFinished ? stop() : reply.raw.once('finish', stop));
  shutdown.addEventListener('abort', onShutdown, { once: true });
  const done = () => {
    clearTimeout(timer);
    shutdown.removeEventListener('abort', onShutdown);
  };
  incoming.on('data', (chunk: Buffer) => {
    drained += chunk.length;
    if (drained > limit.bytes) stop();
  });
  incoming.once('end', done);
  socket.once('close', done);
  incoming.resume();
}
