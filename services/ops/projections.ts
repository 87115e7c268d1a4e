import type { Command } from 'commander';

export function registerProjectionCommands(program: Command): void {
  program.command('projections').description('projection status and replays');
}
