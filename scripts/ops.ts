import { Command } from 'commander';
import { registerProjectionCommands } from '../services/ops/projections.ts';
import { printUnexpected, registerTenantCommands } from '../services/ops/tenants.ts';
import { registerUserCommands } from '../services/ops/users.ts';
import { registerEmployeeCommands } from '../services/ops/employees.ts';
import { registerErasureCommands } from '../services/ops/erasure.ts';
import { registerPrivacyCommands } from '../services/ops/privacy.ts';
import { registerAnalystCommands } from '../services/ops/analysts.ts';

/**
 * `npm run ops -- <command>`: the operator's CLI. Runs against the configured database
 * (DATABASE_URL, or the embedded default's data under DATA_DIR), also while the service runs.
 * Each capability registers its own commands.
 */
// A signal ends the command with the conventional code. `process.exit` runs the 'exit' listener
// shared/db/embedded.ts adds, which sends SIGINT to an embedded server this command started.
for (const [signal, code] of [
  ['SIGINT', 130],
  ['SIGTERM', 143],
  ['SIGHUP', 129],
] as const)
  process.once(signal, () => process.exit(code));

const program = new Command('ops').description('Employee & Analytics Service operations').showHelpAfterError();
registerProjectionCommands(program);
registerTenantCommands(program);
registerUserCommands(program);
registerEmployeeCommands(program);
registerErasureCommands(program);
registerPrivacyCommands(program);
registerAnalystCommands(program);

try {
  await program.parseAsync(process.argv);
} catch (error) {
  // A command outside `opsAction` (projections) that failed unexpectedly: printed as those are.
  printUnexpected(error);
  process.exitCode = 1;
}
// A failed command ends here, as an uncaught error ended it: nothing it left running (a pool, a
// timer) holds it open. The runtime is closed by now; `exit` stops an embedded server it started.
if (process.exitCode !== undefined && process.exitCode !== 0) process.exit();
