import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ConfigError, loadConfig, type Config } from '../../shared/config.ts';
import { createLogger, type Logger } from '../../shared/logger.ts';
import { createRuntime, type Runtime, type RuntimeOptions } from '../runtime.ts';
import { checkReadiness } from '../gateway/health.ts';

/** A started part of the service; `close` stops it gracefully (drain, finish the batch in hand). */
export type RoleHandle = { close(): Promise<void> };

export type RoleContext = { readonly config: Config; readonly logger: Logger; readonly runtime: Runtime };

/**
 * Runs one role as this process: config, runtime, the role itself, and graceful shutdown on
 * SIGINT/SIGTERM (bounded by SHUTDOWN_TIMEOUT_MS). A bad configuration exits with code 2.
 */
export async function runRole(
  role: string,
  start: (context: RoleContext) => Promise<RoleHandle>,
  runtimeOptions: RuntimeOptions = {},
): Promise<void> {
  let config: Config;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
  const logger = createLogger(config, `eas-${role}`);
  const started = Date.now();
  const runtime = await createRuntime(config, logger, runtimeOptions);
  let handle: RoleHandle;
  try {
    handle = await start({ config, logger, runtime });
  } catch (error) {
    logger.fatal({ err: error, role }, 'failed to start');
    await runtime.close();
    process.exit(1);
  }
  logger.info({ role, startupMs: Date.now() - started }, `${role} started`);

  let stopping = false;
  // Raised, never lowered: a crash during a drain still ends the process with 1.
  let exitCode = 0;
  const shutdown = async (signal: string, code = 0) => {
    exitCode = Math.max(exitCode, code);
    if (stopping) return;
    stopping = true;
    logger.info({ signal, role }, 'shutting down');
    const timer = setTimeout(() => {
      logger.error('shutdown timed out; exiting');
      process.exit(1);
    }, config.SHUTDOWN_TIMEOUT_MS);
    timer.unref();
    await handle.close().catch((error: unknown) => logger.error({ err: error }, 'error while stopping'));
    await runtime.close();
    clearTimeout(timer);
    logger.info('stopped');
    process.exit(exitCode);
  };
  process.on('SIGINT', () => void shutdown('SIGINT'));
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  // The terminal closed: drain the same way.
  process.on('SIGHUP', () => void shutdown('SIGHUP'));
  // A launcher (npm, a shell) that dies without passing its signal on would orphan us, and
  // with us the embedded PostgreSQL: follow the parent out.
  const parent = process.ppid;
  setInterval(() => {
    if (process.ppid !== parent) void shutdown('parent exited');
  }, 1_000).unref();
  process.on('uncaughtException', (error) => {
    logger.fatal({ err: error }, 'uncaught exception');
    // A crash is not a clean stop: a supervisor's restart-on-failure must see it.
    void shutdown('uncaughtException', 1);
  });
}

/**
 * `/health/live`, `/health/ready` and `/metrics` for roles without an HTTP API (projector,
 * worker), so orchestrators probe every process the same way.
 */
export async function serveHealth(runtime: Runtime, host: string, port: number): Promise<RoleHandle & { readonly address: string }> {
  const server = createServer((request, response) => {
    const send = (status: number, body: unknown, type = 'application/json') => {
      response.writeHead(status, { 'content-type': type });
      response.end(typeof body === 'string' ? body : JSON.stringify(body));
    };
    void (async () => {
      switch (request.url) {
        case '/health/live':
          return send(200, { status: 'ok' });
        case '/health/ready': {
          // Same rules as the gateway: a non-critical check (e.g. parked projection events) degrades, never fails.
          const { checks, status } = await checkReadiness(runtime.readiness);
          return send(status === 'down' ? 503 : 200, {
            status: status === 'down' ? 'down' : 'up',
            ...(status === 'degraded' && { degraded: true }),
            checks,
          });
        }
        case '/metrics':
          return send(200, await runtime.registry.metrics(), runtime.registry.contentType);
        default:
          return send(404, { status: 404, title: 'Not Found' });
      }
    })().catch(() => send(500, { status: 500, title: 'Internal Server Error' }));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const { port: bound } = server.address() as AddressInfo;
  return {
    address: `http://${host}:${bound}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
