import type { FastifyReply, FastifyRequest } from 'fastify';
import { UnauthorizedError } from '../../shared/errors.ts';

/**
 * What an authenticated request knows about its caller. Set by the auth plugin (services/auth)
 * before any capability handler runs; read it with `requireAuth(request)`.
 */
export type Plan = 'starter' | 'pro' | 'enterprise';

export type RateLimitOverride = { readonly perMinute: number; readonly burst: number };

export type AuthContext = {
  /** Tenant uuid: the key of every tenant-scoped row and stream. */
  readonly tenantId: string;
  readonly tenantSlug: string;
  readonly plan: Plan;
  readonly rateLimitOverride: RateLimitOverride | null;
  readonly userId: string;
  readonly roles: readonly string[];
};

declare module 'fastify' {
  interface FastifyRequest {
    auth?: AuthContext;
  }
}

/**
 * The caller of a request in the authenticated scope. Throws (→ 401) when called from a route
 * outside it, which would be a wiring bug rather than a client error.
 */
export function requireAuth(request: { readonly auth?: AuthContext | undefined }): AuthContext {
  if (!request.auth) throw new UnauthorizedError('This endpoint requires an access token');
  return request.auth;
}

/**
 * Aborted when the client goes away or the gateway starts closing: the signal for handlers that
 * wait on purpose (the feed's long-poll, a replay's hand-off), so that a wait ends as soon as
 * nobody is left to answer, and a drain is bounded by real work, not by the longest wait. The
 * response's 'close' fires once, at its end, whatever happened, which releases the listener.
 */
export function requestSignal(request: FastifyRequest, reply: FastifyReply): AbortSignal {
  const gone = new AbortController();
  reply.raw.once('close', () => gone.abort());
  return AbortSignal.any([request.server.shutdownSignal, gone.signal]);
}

const waitedOnPurpose = new WeakMap<FastifyRequest, number>();

/**
 * Runs a wait the request makes on purpose (the feed's long-poll, read-your-writes, a replay's
 * hand-off) and adds its duration to the request's waited time. The API latency KPI subtracts
 * that time: it measures how long the service worked, and a client that follows the guide by
 * long-polling would otherwise report its own `?wait=` as the service's latency.
 */
export async function waitOnPurpose<T>(request: FastifyRequest, wait: () => Promise<T>): Promise<T> {
  const started = performance.now();
  try {
    return await wait();
  } finally {
    waitedOnPurpose.set(request, (waitedOnPurpose.get(request) ?? 0) + performance.now() - started);
  }
}

/** Milliseconds the request spent in `waitOnPurpose`. */
export function waitedOnPurposeMs(request: FastifyRequest): number {
  return waitedOnPurpose.get(request) ?? 0;
}
