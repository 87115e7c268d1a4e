import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { withTenant } from '../../shared/db/pool.ts';
import type { V1Capability } from '../gateway/app.ts';
import { problemSchema } from '../gateway/problems.ts';
import { requireAuth } from '../gateway/requestContext.ts';
import { PERMISSIONS } from './permissions.ts';
import { tenantHeaders } from '../tenants/tenants.ts';
import { safeText } from '../../shared/validation.ts';
import { tenantHeader, type AuthDeps } from './plugin.ts';
import { listRoles } from './roles.ts';

const tokenPairSchema = z
  .object({
    accessToken: z.string(),
    tokenType: z.literal('Bearer'),
    expiresIn: z.number().int().describe('Access-token lifetime in seconds (900)'),
    refreshToken: z.string().describe('Opaque, single-use; exchange it at POST /v1/auth/refresh'),
    refreshExpiresIn: z.number().int().describe('Refresh-token lifetime in seconds'),
  })
  .meta({ id: 'TokenPair' });

// Request bodies are strict (docs/versioning.md): an unknown field is a 400, never silently dropped.
const refreshBody = z.object({ refreshToken: safeText(200, { min: 1 }).describe('As returned by login or refresh') }).strict();
// Any text a person may have typed, but storable and bounded: a NUL in an email must be a 400, not a 500.
const loginBody = z.object({ email: safeText(320, { min: 1 }), password: safeText(1024, { min: 1 }) }).strict();

/**
 * POST /v1/auth/login and /refresh: public routes in their own encapsulated context (no bearer
 * token; the credentials are in the body). Logout is not among them: only login and refresh are
 * exempt from the bearer token, so it lives in `sessionRoutes`, inside the authenticated scope.
 */
export function authRoutes(deps: AuthDeps): V1Capability {
  return async (v1) => {
    await v1.register(async (scope: FastifyInstance) => {
      const app = scope.withTypeProvider<ZodTypeProvider>();
      const problems = { 400: problemSchema, 401: problemSchema, 429: problemSchema, 503: problemSchema };

      app.post(
        '/auth/login',
        {
          schema: {
            tags: ['auth'],
            operationId: 'login',
            summary: 'Log in with e-mail and password',
            security: [],
            headers: tenantHeaders,
            body: loginBody,
            response: { 200: tokenPairSchema, ...problems },
          },
        },
        async (request) => deps.sessions.login(tenantHeader(request), request.body.email, request.body.password, { ip: request.ip }),
      );

      app.post(
        '/auth/refresh',
        {
          schema: {
            tags: ['auth'],
            operationId: 'refreshToken',
            summary: 'Exchange a refresh token for a new token pair (the old refresh token is used up)',
            security: [],
            headers: tenantHeaders,
            body: refreshBody,
            response: { 200: tokenPairSchema, ...problems },
          },
        },
        async (request) => deps.sessions.refresh(tenantHeader(request), request.body.refreshToken, { ip: request.ip }),
      );
    });
  };
}

/**
 * POST /v1/auth/logout: mount inside `authenticated(...)`. Revokes the refresh token's whole
 * session (its family) when it belongs to the caller; answers 204 either way, so it tells
 * nothing about other people's tokens.
 */
export function sessionRoutes(deps: AuthDeps): V1Capability {
  return async (v1) => {
    const app = v1.withTypeProvider<ZodTypeProvider>();
    app.post(
      '/auth/logout',
      {
        config: { permission: 'session:end' },
        schema: {
          tags: ['auth'],
          operationId: 'logout',
          summary: "End the caller's session: revoke the refresh token and its successors",
          body: refreshBody,
          response: { 204: z.null().describe('Revoked (also for an unknown or foreign token)'), 400: problemSchema, 401: problemSchema },
        },
      },
      async (request, reply) => {
        const caller = requireAuth(request);
        await deps.sessions.logout(caller.tenantSlug, request.body.refreshToken, caller.userId);
        return reply.code(204).send(null);
      },
    );
  };
}

const roleSchema = z
  .object({
    id: z.uuid(),
    name: z.string(),
    permissions: z.array(z.enum(PERMISSIONS)),
  })
  .meta({ id: 'Role' });

/** GET /v1/roles: mount inside `authenticated(...)`. */
export function rolesRoutes(deps: Pick<AuthDeps, 'pool'>): V1Capability {
  return async (v1) => {
    const app = v1.withTypeProvider<ZodTypeProvider>();
    app.get(
      '/roles',
      {
        config: { permission: 'roles:read' },
        schema: {
          tags: ['auth'],
          operationId: 'listRoles',
          summary: "The tenant's roles (use an id as an employee's roleId)",
          response: { 200: z.object({ data: z.array(roleSchema) }), 401: problemSchema, 403: problemSchema },
        },
      },
      async (request) => {
        const auth = requireAuth(request);
        const roles = await withTenant(deps.pool, auth.tenantId, (tx) => listRoles(tx, auth.tenantId));
        return { data: roles.map((role) => ({ ...role, permissions: [...role.permissions] })) };
      },
    );
  };
}
