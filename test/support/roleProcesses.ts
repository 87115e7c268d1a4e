import { spawn, type ChildProcess } from 'node:child_process';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from './processes.ts';
import { waitFor } from './waitFor.ts';

/**
 * Runs roles of the service as real child processes, as `npm start -- <role>` does
 * (`node services/main.ts <role>`), each on its own port, and stops them.
 */
const ROOT = resolve(fileURLToPath(new URL('.', import.meta.url)), '..', '..');

export type RoleProcess = {
  readonly name: string;
  readonly url: string;
  readonly child: ChildProcess;
  /** Everything the process printed, for failure messages. */
  output(): string;
  stop(): Promise<number | null>;
};

export async function startRole(name: string, args: readonly string[], env: Record<string, string>): Promise<RoleProcess> {
  const port = await freePort();
  const child = spawn(process.execPath, ['services/main.ts', ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env, HOST: '127.0.0.1', PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-20_000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = new Promise<number | null>((resolveExit) => child.once('exit', (code) => resolveExit(code)));
  const role: RoleProcess = {
    name,
    url: `http://127.0.0.1:${port}`,
    child,
    output: () => output,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
  await waitForHealth(role, 150_000);
  return role;
}

async function waitForHealth(role: RoleProcess, timeoutMs: number): Promise<void> {
  await waitFor(
    async () => {
      if (role.child.exitCode !== null) throw new Error(`${role.name} exited with ${role.child.exitCode}:\n${role.output()}`);
      try {
        return (await fetch(`${role.url}/health/live`, { signal: AbortSignal.timeout(1_000) })).ok;
      } catch {
        return false; // not listening yet
      }
    },
    timeoutMs,
    `${role.name} healthy`,
  ).catch((error: Error) => {
    throw new Error(`${error.message}:\n${role.output()}`, { cause: error });
  });
}
