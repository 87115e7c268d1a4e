import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../../support/processes.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * The README's run command, as a new user runs it: `npm start` with no URLs configured starts
 * an embedded PostgreSQL and every part in one process; SIGTERM stops all of it, postgres too.
 */
const postgresProcessesFor = (dataDir: string) => {
  const out = execFileSync('ps', ['-eo', 'pid,args'], { encoding: 'utf8' });
  return out.split('\n').filter((line) => line.includes('postgres') && line.includes(dataDir));
};

describe('when the service starts on the embedded default', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'eas-embedded-'));
  afterAll(() => {
    for (const line of postgresProcessesFor(dataDir)) {
      const pid = Number.parseInt(line.trim(), 10);
      if (pid) process.kill(pid, 'SIGKILL');
    }
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('is ready within 30 s and leaves no postgres process after SIGTERM', async () => {
    const [port, pgPort] = await Promise.all([freePort(), freePort()]);
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      PORT: String(port),
      EMBEDDED_PG_PORT: String(pgPort),
      DATA_DIR: dataDir,
      LOG_LEVEL: 'warn',
    };
    for (const key of ['DATABASE_URL', 'EVENTSTORE_URL', 'KAFKA_BROKERS', 'REDIS_URL']) delete env[key];
    const started = Date.now();
    const child = spawn('npm', ['start'], { cwd: resolve(import.meta.dirname, '../../..'), env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    const exited = new Promise<string>((r) => child.once('exit', (code, signal) => r(`${code ?? signal}`)));

    let readyAfter = -1;
    const readyOrExited = async () => {
      if (child.exitCode !== null) return true;
      try {
        const response = await fetch(`http://127.0.0.1:${port}/health/ready`);
        if (response.status === 200) readyAfter = Date.now() - started;
      } catch {
        // not listening yet
      }
      return readyAfter > 0;
    };
    // On a timeout, the assertion below fails with the child's output.
    await waitFor(readyOrExited, 30_000 - (Date.now() - started), 'ready').catch(() => undefined);
    expect(readyAfter, output).toBeGreaterThan(0);
    expect(output).toContain(`listening on http://127.0.0.1:${port}`);
    expect(postgresProcessesFor(dataDir).length).toBeGreaterThan(0);

    child.kill('SIGTERM');
    // npm re-raises the signal its child handled, so npm itself may report SIGTERM.
    expect(['0', 'SIGTERM']).toContain(await exited);
    await expect.poll(() => postgresProcessesFor(dataDir).length, { timeout: 10_000 }).toBe(0);
    console.info(`[embedded start] ready after ${readyAfter} ms (cold: initdb included)`);
  }, 60_000);
});
