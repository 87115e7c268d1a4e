import { createGateway, type GatewayOptions } from '../gateway/app.ts';
import { listen } from '../gateway/server.ts';
import { authenticated, createAuthDeps, jwksRoutes, type AuthDeps } from '../auth/plugin.ts';
import type { DatabasePool } from '../../shared/db/pool.ts';
import type { TenantReader } from '../../shared/db/tenantReader.ts';
import type { EventStore } from '../../shared/event-store/port.ts';
import type { DataKeyStore } from '../../shared/personal-data/dataKeys.ts';
import type { EmailHash } from '../../shared/personal-data/emailHash.ts';
import type { RateLimiter } from '../../shared/rate-limit/limiter.ts';
import type { UsageSamplePublisher } from '../../shared/metrics-bus/port.ts';
import type { UsageProgress } from '../../projections/kpi/watermarks.ts';
import { authRoutes, rolesRoutes, sessionRoutes } from '../auth/routes.ts';
import { BEARER_SCHEME_DESCRIPTION } from '../auth/tokens.ts';
import { bootstrapTenant } from '../tenants/bootstrap.ts';
import { employeesCapability } from '../employees/capability.ts';
import { changesCapability } from '../changes/capability.ts';
import { webhooksCapability } from '../webhooks/capability.ts';
import { loadSecretBox, type SecretBox } from '../webhooks/secrets.ts';
import { analyticsRoutes } from '../analytics/routes.ts';
import { billingRoutes } from '../billing/routes.ts';
import { usageSamples } from '../analytics/usageSamples.ts';
import { rateLimited } from '../gateway/rateLimit.ts';
import { activeTracing } from '../../shared/telemetry/tracing.ts';
import { dashboardRoutes } from '../dashboard/routes.ts';
import type { RoleContext, RoleHandle } from './process.ts';

/** The ports the gateway's capabilities are bound to. */
export type GatewayPorts = {
  readonly auth: AuthDeps;
  readonly pool: DatabasePool;
  /** Transaction-free tenant-scoped reads for list pages and series; without it they run in `withTenant` transactions. */
  readonly tenantReader?: TenantReader;
  readonly eventStore: EventStore;
  /** The same log without the sealing boundary (an erasure reads it when a person's key is missing). */
  readonly logStore: EventStore;
  /** False when the log is KurrentDB, not `pool`'s database (an erasure then appends, then forgets). */
  readonly logInDatabase: boolean;
  /** The per-employee data keys (an erasure destroys one). */
  readonly dataKeys: Pick<DataKeyStore, 'destroy'>;
  /** The keyed hash email uniqueness is kept on. */
  readonly emailHash: EmailHash;
  readonly rateLimiter: RateLimiter;
  readonly usagePublisher: UsageSamplePublisher;
  /** For the change feed's LISTEN connection (opened on the first long-poll only). */
  readonly databaseUrl: string;
  /** Seals webhook signing secrets; the SSRF guard's allow-list (WEBHOOK_ALLOW_HOSTS). */
  readonly webhooks: { readonly secrets: SecretBox; readonly allowHosts: readonly string[] };
  /** The metrics bus's consumer end, for the KPI `asOf` usage watermark (topic head / pending samples). */
  readonly usageSource?: UsageProgress['source'];
};

/**
 * Every capability of the API, bound to its ports: the one place where they are wired (the
 * gateway role and the OpenAPI/typed-client generator both build the gateway from it).
 */
export function gatewayRoutes(ports: GatewayPorts): Pick<GatewayOptions, 'v1' | 'publicRoutes' | 'bearerAuthDescription'> {
  const { auth, pool, eventStore } = ports;
  return {
    // Public auth routes first; every capability that needs a caller goes inside authenticated(...).
    v1: [
      authRoutes(auth),
      authenticated(
        auth,
        rateLimited(ports.rateLimiter),
        usageSamples(ports.usagePublisher),
        sessionRoutes(auth),
        rolesRoutes(auth),
        changesCapability({ pool, databaseUrl: ports.databaseUrl }),
        webhooksCapability({ pool, secrets: ports.webhooks.secrets, targets: { allowHosts: ports.webhooks.allowHosts } }),
        employeesCapability({
          pool,
          tenantReader: ports.tenantReader,
          eventStore,
          emailHash: ports.emailHash,
          log: ports.logStore,
          logInDatabase: ports.logInDatabase,
          dataKeys: ports.dataKeys,
        }),
        analyticsRoutes({
          pool,
          tenantReader: ports.tenantReader,
          store: eventStore,
          ...(ports.usageSource ? { usage: { source: ports.usageSource } } : {}),
        }),
        // After the KPI reads: its path lies under /analytics, and the API document lists it after them.
        billingRoutes({ store: eventStore }),
      ),
    ],
    publicRoutes: [jwksRoutes(auth), dashboardRoutes],
    bearerAuthDescription: BEARER_SCHEME_DESCRIPTION,
  };
}

/**
 * The HTTP gateway: auth, tenancy, rate limits, the /v1 capabilities. Stateless apart from
 * its connections: run as many as needed behind a load balancer (they share PostgreSQL,
 * Redis and Kafka). Capabilities are wired here, in one place.
 */
export async function startGatewayRole({ config, logger, runtime }: RoleContext): Promise<RoleHandle & { readonly address: string }> {
  await bootstrapTenant(runtime.pool, config, logger);
  const webhookSecrets = await loadSecretBox(config);
  const auth = await createAuthDeps({ pool: runtime.pool, config, redisUrl: config.REDIS_URL });
  const tracing = activeTracing();
  const app = await createGateway({
    config,
    logger,
    readiness: runtime.readiness,
    registry: runtime.registry,
    trustProxy: config.TRUST_PROXY,
    ...gatewayRoutes({
      auth,
      pool: runtime.pool,
      tenantReader: runtime.tenantReader,
      eventStore: runtime.eventStore,
      logStore: runtime.logStore,
      logInDatabase: runtime.logInDatabase,
      dataKeys: runtime.dataKeys,
      emailHash: runtime.emailHash,
      rateLimiter: runtime.rateLimiter,
      usagePublisher: runtime.usage.publisher,
      usageSource: runtime.usage.source,
      databaseUrl: runtime.databaseUrl,
      webhooks: { secrets: webhookSecrets, allowHosts: config.WEBHOOK_ALLOW_HOSTS },
    }),
    ...(tracing && { tracing: tracing.fastifyPlugin }),
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
