import { ConfigError, loadConfig } from '../shared/config.ts';
import { createLogger } from '../shared/logger.ts';
import { createGateway } from './gateway/app.ts';
import { listen } from './gateway/server.ts';
import { createRuntime } from './runtime.ts';
import { runProjection, type ProjectorHandle } from '../projections/runner/runner.ts';
import { allProjections } from '../projections/index.ts';
import { authenticated, createAuthDeps, jwksRoutes } from './auth/plugin.ts';
import { authRoutes, rolesRoutes } from './auth/routes.ts';
import { bootstrapTenant } from './tenants/bootstrap.ts';
import { employeesCapability } from './employees/capability.ts';

/**
 * `npm start`: every part in one process (gateway + projectors), on the embedded default
 * unless URLs are configured. SIGINT/SIGTERM drain requests, let projectors finish their
 * batch, and stop the embedded PostgreSQL.
 */
async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
  const logger = createLogger(config);
  const started = Date.now();
  const runtime = await createRuntime(config, logger);
  await bootstrapTenant(runtime.pool, config, logger);
  const auth = await createAuthDeps({ pool: runtime.pool, config, redisUrl: config.REDIS_URL });

  const projectors: ProjectorHandle[] = allProjections.map((projection) =>
    runProjection(runtime.pool, runtime.eventStore, projection, {
      onError: (error) => logger.error({ err: error, projection: projection.name }, 'projector failed; retrying'),
    }),
  );
  const app = await createGateway({
    config,
    logger,
    readiness: runtime.readiness,
    registry: runtime.registry,
    // Public auth routes first; every capability that needs a caller goes inside authenticated(...).
    v1: [authRoutes(auth), authenticated(auth, rolesRoutes(auth), employeesCapability({ pool: runtime.pool, eventStore: runtime.eventStore }))],
    publicRoutes: [jwksRoutes(auth)],
  });
  const address = await listen(app, config.HOST, config.PORT);
  logger.info({ address, startupMs: Date.now() - started }, `listening on ${address}`);
  process.stdout.write(`Employee & Analytics Service listening on ${address} (docs: ${address}/docs)\n`);

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down');
    const timer = setTimeout(() => {
      logger.error('shutdown timed out; exiting');
      process.exit(1);
    }, config.SHUTDOWN_TIMEOUT_MS);
    timer.unref();
    await app.close();
    await Promise.all(projectors.map((p) => p.stop()));
    await auth.close();
    await runtime.close();
    clearTimeout(timer);
    logger.info('stopped');
    process.exit(0);
  };
  process.on('SIGINT', () => void shutdown('SIGINT'));
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('uncaughtException', (error) => {
    logger.fatal({ err: error }, 'uncaught exception');
    void shutdown('uncaughtException');
  });
}

await main();
