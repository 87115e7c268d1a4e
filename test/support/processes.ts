import type { ChildProcess } from 'node:child_process';

/** Kills `child` with SIGKILL (it releases nothing, as in a crash) and resolves once it has exited; at once if it already has. */
export function stopProcess(child: ChildProcess): Promise<void> {
  return new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}
