import { runRole } from './roles/process.ts';

/**
 * `npm start [-- <role>]`:
 *   (no role) / all      every part in one process (the embedded default unless URLs are set)
 *   gateway              the HTTP API only
 *   projector <name>     one projector (employees, kpi) — several copies may run
 *   worker               BullMQ consumers: queued projection replays, scheduled KPI rollups
 * SIGINT/SIGTERM drain requests, let projectors finish their batch, and stop the embedded
 * PostgreSQL. Each role's modules load only when that role runs.
 */
const usage = 'usage: npm start [-- all | gateway | projector <employees|kpi> | worker]';
const [role = 'all', name] = process.argv.slice(2);

switch (role) {
  case 'all': {
    const { startAllRole } = await import('./roles/all.ts');
    await runRole('all', startAllRole);
    break;
  }
  case 'gateway': {
    const { startGatewayRole } = await import('./roles/gateway.ts');
    await runRole('gateway', startGatewayRole);
    break;
  }
  case 'projector': {
    if (!name) {
      process.stderr.write(`projector needs a name\n${usage}\n`);
      process.exit(2);
    }
    const { startProjectorRole } = await import('./roles/projector.ts');
    await runRole(`projector-${name}`, (context) => startProjectorRole(context, name));
    break;
  }
  case 'worker': {
    const { startWorkerRole } = await import('./roles/worker.ts');
    await runRole('worker', startWorkerRole);
    break;
  }
  default:
    process.stderr.write(`unknown role ${JSON.stringify(role)}\n${usage}\n`);
    process.exit(2);
}
