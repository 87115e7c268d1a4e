import type { FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { ServiceUnavailableError, TooManyRequestsError } from '../../shared/errors.ts';
import type { RateLimiter } from '../../shared/rate-limit/limiter.ts';
import type { V1Capability } from './app.ts';
import { problemSchema } from './problems.ts';
import { resolvePolicy } from '../../shared/rate-limit/policy.ts';
import type { BucketDecision, BucketPolicy } from '../../shared/rate-limit/port.ts';

/** Which bucket a request draws from; `undefined` leaves the request unlimited and unlabelled. */
export type RateLimitTarget = { readonly key: string; readonly policy: BucketPolicy | null };

export type RateLimitPluginOptions = {
  readonly limiter: RateLimiter;
  /** Defaults to the tenant of `request.auth` with its plan or override. */
  readonly target?: (request: FastifyRequest) => RateLimitTarget | undefined;
  /**
   * The hook to run in. It must come after authentication in the same scope; `onRequest` (the
   * default) refuses before the body is even read.
   */
  readonly hook?: 'onRequest' | 'preValidation' | 'preHandler';
};

/** The policy of the authenticated tenant, re-read from request.auth on every request. */
export const tenantTarget = (request: FastifyRequest): RateLimitTarget | undefined =>
  request.auth ? { key: `tenant:${request.auth.tenantId}`, policy: resolvePolicy(request.auth) } : undefined;

const POLICY_NAME = 'burst';
/** Seconds a refused client should wait when the limiter itself is down (fail closed). */
const UNAVAILABLE_RETRY_AFTER_S = 2;

const seconds = (ms: number) => Math.ceil(ms / 1000);

/**
 * Response fields, IETF httpapi ratelimit-headers draft (-10/-11) plus the widely used trio:
 * - `RateLimit-Policy: "burst";q=<burst>;w=<seconds to refill the whole bucket>` — q/w is the
 *   sustained rate for every plan (10 per 10 s = 60/min), q the burst.
 * - `RateLimit: "burst";r=<whole tokens left>;t=<s>` where t is, while tokens remain, the time
 *   until the bucket is full again, and at r=0 the wait for the next token (so on a 429 it
 *   equals Retry-After, as the draft asks).
 * - `RateLimit-Limit` = q, `RateLimit-Remaining` = r, `RateLimit-Reset` = t.
 */
export function rateLimitHeaders(policy: BucketPolicy, decision: BucketDecision): Record<string, string> {
  const window = Math.max(1, Math.ceil((policy.burst * 60) / policy.perMinute));
  const remaining = decision.allowed ? decision.remaining : 0;
  const t = remaining > 0 ? seconds(decision.resetMs) : Math.max(1, seconds(decision.waitMs));
  return {
    'ratelimit-policy': `"${POLICY_NAME}";q=${policy.burst};w=${window}`,
    ratelimit: `"${POLICY_NAME}";r=${remaining};t=${t}`,
    'ratelimit-limit': String(policy.burst),
    'ratelimit-remaining': String(remaining),
    'ratelimit-reset': String(t),
  };
}

/**
 * Per-tenant token bucket for every route of the scope it is registered in (fastify-plugin, so
 * the hook joins that scope). Register it right after the authentication hook.
 */
export const rateLimitPlugin = fp<RateLimitPluginOptions>(
  async (scope, options) => {
    const target = options.target ?? tenantTarget;
    // Every route of the scope can answer 429, and its answers carry the bucket's headers: the
    // document says so for each, including routes added later (services/gateway/openApiContract.ts).
    scope.addHook('onRoute', (route) => {
      route.config = { ...route.config, rateLimited: true };
      if (route.schema?.response === undefined) return;
      route.schema = { ...route.schema, response: { 429: problemSchema, ...(route.schema.response as object) } };
    });
    scope.addHook(options.hook ?? 'onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
      const found = target(request);
      if (!found) return;
      const outcome = await options.limiter.check(found.key, found.policy);
      switch (outcome.kind) {
        case 'unlimited':
          return;
        case 'unavailable':
          if (outcome.allowed) return;
          throw new ServiceUnavailableError(
            'Rate limiting is temporarily unavailable; retry shortly',
            {},
            { 'retry-after': String(UNAVAILABLE_RETRY_AFTER_S) },
          );
        case 'decided': {
          const headers = rateLimitHeaders(outcome.policy, outcome.decision);
          if (outcome.decision.allowed) {
            reply.headers(headers);
            return;
          }
          const retryAfter = headers['ratelimit-reset'] ?? '1';
          throw new TooManyRequestsError(
            `Rate limit of ${outcome.policy.perMinute} requests per minute (burst ${outcome.policy.burst}) exceeded; retry in ${retryAfter} s`,
            { 'violated-policies': [POLICY_NAME] },
            { ...headers, 'retry-after': retryAfter },
          );
        }
        default: {
          const unreachable: never = outcome;
          return unreachable;
        }
      }
    });
  },
  { name: 'rate-limit' },
);

/**
 * The limiter as a capability of the authenticated scope, placed first:
 * `authenticated(auth, rateLimited(runtime.rateLimiter), ...capabilities)`. The scope adds its
 * auth hook before calling capabilities, so this hook runs after it and sees `request.auth`.
 */
export const rateLimited =
  (limiter: RateLimiter, options: Omit<RateLimitPluginOptions, 'limiter'> = {}): V1Capability =>
  async (scope) => {
    await scope.register(rateLimitPlugin, { ...options, limiter });
  };
