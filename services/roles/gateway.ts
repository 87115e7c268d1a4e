import { createGateway } from '../gateway/app.ts';
import { listen } from '../gateway/server.ts';
import { authenticated, createAuthDeps, jwksRoutes } from '../auth/plugin.ts';
import { authRoutes, rolesRoutes, sessionRoutes } from '../auth/routes.ts';
import { bootstrapTenant } from '../tenants/bootstrap.ts';
import { employeesCapability } from '../employees/capability.ts';
import { analyticsRoutes } from '../analytics/routes.ts';
import { usageSamples } from '../analytics/usageSamples.ts';
import { rateLimited } from '../gateway/rateLimit.ts';
import { activeTracing } from '../../shared/telemetry/tracing.ts';
import type { RoleContext, RoleHandle } from './process.ts';

/**
 * The HTTP gateway: auth, tenancy, rate limits, the /v1 capabilities. Stateless apart from
 * its connections: run as many as needed behind a load balancer (they share PostgreSQL,
 * Redis and Kafka). Capabilities are wired here, in one place.
 */
export async function startGatewayRole({ config, logger, runtime }: RoleContext): Promise<RoleHandle & { readonly address: string }> {
  await bootstrapTenant(runtime.pool, config, logger);
  const auth = await createAuthDeps({ pool: runtime.pool, config, redisUrl: config.REDIS_URL });
  const app = await createGateway({
    config,
    logger,
    readiness: runtime.readiness,
    registry: runtime.registry,
    // Public auth routes first; every capability that needs a caller goes inside authenticated(...).
    v1: [authRoutes(auth), authenticated(auth, rateLimited(runtime.rateLimiter), usageSamples(runtime.usage.publisher), sessionRoutes(auth), rolesRoutes(auth), employeesCapability({ pool: runtime.pool, eventStore: runtime.eventStore }), analyticsRoutes({ pool: runtime.pool, store: runtime.eventStore }))],
    publicRoutes: [jwksRoutes(auth)],
    ...(activeTracing() ? { tracing: activeTracing()?.fastifyPlugin } : {}),
  });
  const address = await listen(app, config.HOST, config.PORT);
  logger.info({ address }, `listening on ${address}`);
  process.stdout.write(`Employee & Analytics Service listening on ${address} (docs: ${address}/docs)\n`);
  return {
    address,
    async close() {
      await app.close();
      await auth.close();
    },
  };
}
