import { Command } from 'commander';
import { registerProjectionCommands } from '../services/ops/projections.ts';
import { registerTenantCommands } from '../services/ops/tenants.ts';
import { registerUserCommands } from '../services/ops/users.ts';

/**
 * `npm run ops -- <command>`: the operator's CLI. Runs against the configured database
 * (DATABASE_URL, or the embedded default's data under DATA_DIR), also while the service runs.
 * Each capability registers its own commands.
 */
const program = new Command('ops').description('Employee & Analytics Service operations').showHelpAfterError();
registerProjectionCommands(program);
registerTenantCommands(program);
registerUserCommands(program);

await program.parseAsync(process.argv);
