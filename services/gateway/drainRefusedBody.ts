import { Socket } from 'node:net';
import type { FastifyReply, FastifyRequest, onSendHookHandler } from 'fastify';

/** What a refused request may still send us before its connection is closed, in bytes and time. */
export const DRAIN_LIMIT = { bytes: 16 * 1_048_576, ms: 5_000 } as const;

/** Requests whose body is being read away already (the answer may be sent more than once on error paths). */
const draining = new WeakSet<FastifyRequest>();

/**
 * Reads and discards the rest of a refused request's body, so that its connection is closed
 * only after the client has had the answer. Closing a socket with unread data makes the kernel
 * send a reset, which a client still writing its body (Node's fetch) reports as EPIPE instead of
 * the response it had been sent, so the server must keep reading until the answer is out.
 * The answer keeps the connection open (with `Connection: close` Node would close it as soon as
 * the answer is written); once the body has been read, the connection serves the next request.
 * A body that goes on past `DRAIN_LIMIT` ends the connection, so a refused client costs at most
 * that much bandwidth and time, and no memory.
 */
export function drainRefusedBody(request: FastifyRequest, reply: FastifyReply, limit = DRAIN_LIMIT): void {
  const incoming = request.raw;
  const socket = incoming.socket;
  // An injected request (light-my-request) has no connection to keep or close.
  if (!(socket instanceof Socket) || incoming.complete || incoming.readableEnded || draining.has(request)) return;
  draining.add(request);
  reply.removeHeader('connection');
  let drained = 0;
  const stop = () => socket.destroy();
  const timer = setTimeout(stop, limit.ms).unref();
  // A gateway that starts closing waits for every connection still receiving a request: this
  // one ends once its answer is out rather than holding the drain for its bound.
  const shutdown = request.server.shutdownSignal;
  const onShutdown = () => (reply.raw.writableFinished ? stop() : reply.raw.once('finish', stop));
  const onData = (chunk: Buffer) => {
    drained += chunk.length;
    if (drained > limit.bytes) stop();
  };
  // On a keep-alive connection the socket outlives this request: everything added to it (and
  // to the request) goes when the drain ends, or each refused request would leave a listener
  // holding its request and reply alive.
  const done = () => {
    clearTimeout(timer);
    shutdown.removeEventListener('abort', onShutdown);
    reply.raw.off('finish', stop);
    incoming.off('data', onData);
    incoming.off('end', done);
    socket.off('close', done);
  };
  incoming.on('data', onData);
  incoming.once('end', done);
  socket.once('close', done);
  if (shutdown.aborted) onShutdown();
  else shutdown.addEventListener('abort', onShutdown, { once: true });
  incoming.resume();
}

/**
 * Every answer sent before its request's body was read (a 401 from authentication, a 404, a
 * 429 from a rate limit, a 413) drains that body within `DRAIN_LIMIT`: left to itself, Node
 * reads the rest of an unread body once the answer is out, without any bound, to keep the
 * connection alive. (Callback style: on every response, an async hook would cost a promise.)
 */
export const drainUnreadBody: onSendHookHandler = (request, reply, payload, done) => {
  drainRefusedBody(request, reply);
  done(null, payload);
};
