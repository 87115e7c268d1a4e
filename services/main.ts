import { runRole } from './roles/process.ts';
import { startAllRole } from './roles/all.ts';
import { startGatewayRole } from './roles/gateway.ts';
import { startProjectorRole } from './roles/projector.ts';
import { startWorkerRole } from './roles/worker.ts';

/**
 * `npm start [-- <role>]`:
 *   (no role) / all      every part in one process (the embedded default unless URLs are set)
 *   gateway              the HTTP API only
 *   projector <name>     one projector (employees, kpi) — several copies may run
 *   worker               BullMQ consumers: queued projection replays, scheduled KPI rollups
 * SIGINT/SIGTERM drain requests, let projectors finish their batch, and stop the embedded
 * PostgreSQL.
 */
const usage = 'usage: npm start [-- all | gateway | projector <employees|kpi> | worker]';
const [role = 'all', name] = process.argv.slice(2);

switch (role) {
  case 'all':
    await runRole('all', startAllRole);
    break;
  case 'gateway':
    await runRole('gateway', startGatewayRole);
    break;
  case 'projector':
    if (!name) {
      process.stderr.write(`projector needs a name\n${usage}\n`);
      process.exit(2);
    }
    await runRole(`projector-${name}`, (context) => startProjectorRole(context, name));
    break;
  case 'worker':
    await runRole('worker', startWorkerRole);
    break;
  default:
    process.stderr.write(`unknown role ${JSON.stringify(role)}\n${usage}\n`);
    process.exit(2);
}
