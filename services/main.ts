import { register } from 'node:module';

// Tracing is off unless an OTLP endpoint is configured. When on, the SDK starts before any
// other module of ours loads (everything below is imported dynamically), so its pg, ioredis and
// kafkajs instrumentations can wrap those clients as they are first imported (ESM: through
// import-in-the-middle's loader hook).
if (process.env.OTEL_EXPORTER_OTLP_ENDPOINT) {
  register('@opentelemetry/instrumentation/hook.mjs', import.meta.url);
  const { startTracing } = await import('../shared/telemetry/sdk.ts');
  startTracing({ serviceName: `eas-${process.argv[2] ?? 'all'}` });
}
const { runRole } = await import('./processes/process.ts');

/**
 * `npm start [-- <role>]`:
 *   (no role) / all      every part in one process (the embedded default unless URLs are set)
 *   gateway              the HTTP API only
 *   projector <name>     one projector (employees, kpi) — several copies may run
 *   worker               BullMQ consumers: queued projection replays, scheduled KPI rollups
 * SIGINT/SIGTERM drain requests, let projectors finish their batch, and stop the embedded
 * PostgreSQL. Each role's modules load only when that role runs. OTEL_EXPORTER_OTLP_ENDPOINT turns
 * on OpenTelemetry traces (docs/operations.md).
 */
const usage = 'usage: npm start [-- all | gateway | projector <employees|kpi> | worker]';
const [role = 'all', name] = process.argv.slice(2);

switch (role) {
  case 'all': {
    const { startAllRole } = await import('./processes/all.ts');
    await runRole('all', startAllRole);
    break;
  }
  case 'gateway': {
    const { startGatewayRole } = await import('./processes/gateway.ts');
    // No KPI consumer runs in this process: without Kafka its usage samples are dropped.
    await runRole('gateway', startGatewayRole, { usageConsumedHere: false });
    break;
  }
  case 'projector': {
    if (!name) {
      process.stderr.write(`projector needs a name\n${usage}\n`);
      process.exit(2);
    }
    const { startProjectorRole } = await import('./processes/projector.ts');
    await runRole(`projector-${name}`, (context) => startProjectorRole(context, name));
    break;
  }
  case 'worker': {
    const { startWorkerRole } = await import('./processes/worker.ts');
    await runRole('worker', startWorkerRole);
    break;
  }
  default:
    process.stderr.write(`unknown role ${JSON.stringify(role)}\n${usage}\n`);
    process.exit(2);
}
