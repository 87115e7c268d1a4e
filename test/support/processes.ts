import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { testPersonalDataEnv } from './personalData.ts';
import { createServer } from 'node:net';
import { resolve } from 'node:path';
import { promisify } from 'node:util';

/** A TCP port nothing listens on right now. */
export function freePort(): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/** Kills `child` with SIGKILL (it releases nothing, as in a crash) and resolves once it has exited; at once if it already has. */
export function stopProcess(child: ChildProcess): Promise<void> {
  return new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

/**
 * Resolves once `child` (spawned with its stdout piped) has printed `text`; rejects, with what it
 * printed, if it exits first or after `timeoutMs`. Its stdout is read on afterwards, so the pipe
 * never fills.
 */
export function untilPrinted(child: ChildProcess, text: string, what: string, timeoutMs = 10_000): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`${what} did not start within ${timeoutMs} ms:\n${out}`)), timeoutMs);
    child.stdout?.on('data', (chunk: Buffer) => {
      if (out.includes(text)) return;
      out += chunk.toString('utf8');
      if (out.includes(text)) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited with ${code ?? signal}:\n${out}`));
    });
  });
}

/** A throwaway redis-server of our own on `port` (no persistence), so that a test can kill it and start it again empty. */
export async function startRedisServer(port: number): Promise<ChildProcess> {
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  await untilPrinted(child, 'Ready to accept connections', 'redis-server');
  return child;
}

const OPS_SCRIPT = resolve(import.meta.dirname, '../../scripts/ops.ts');

/**
 * The ops CLI (`scripts/ops.ts`) as an operator runs it, against `databaseUrl`, with this test
 * process's personal-data keys: its exit code and output.
 */
export const runOps = (databaseUrl: string, ...args: string[]) =>
  runOpsWith({ ...process.env, ...testPersonalDataEnv, DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn' }, ...args);

/** `runOps` with exactly this environment (e.g. the embedded default's, without DATABASE_URL). */
export async function runOpsWith(env: NodeJS.ProcessEnv, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [OPS_SCRIPT, ...args], { env, timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: number; stdout?: string; stderr?: string };
    return { code: failed.code ?? -1, stdout: failed.stdout ?? '', stderr: failed.stderr ?? '' };
  }
}

/** `runOps` with `input` on the command's stdin (a password for `--password-stdin`). */
export function runOpsWithInput(
  databaseUrl: string,
  input: string,
  ...args: string[]
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const env = { ...process.env, DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn' };
    const child = execFile(process.execPath, [OPS_SCRIPT, ...args], { env, timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stdout, stderr });
    });
    child.stdin?.end(input);
  });
}
