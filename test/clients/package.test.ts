import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { employeesProjection } from '../../projections/employees/employeesProjection.ts';
import { authenticated, type AuthDeps } from '../../services/auth/plugin.ts';
import { authRoutes, rolesRoutes, sessionRoutes } from '../../services/auth/routes.ts';
import { employeesCapability } from '../../services/employees/capability.ts';
import { createGateway } from '../../services/gateway/app.ts';
import { rateLimited } from '../../services/gateway/rateLimit.ts';
import { createPostgresEventStore } from '../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../shared/event-store/port.ts';
import { readCheckpoint } from '../../shared/projections/checkpoints.ts';
import { runProjection, type ProjectorHandle } from '../../shared/projections/follow.ts';
import { createRateLimiter } from '../../shared/rate-limit/limiter.ts';
import { createMemoryRateLimitStore } from '../../shared/rate-limit/memory.ts';
import { createTestAuth, createTestUser, provisionTenant } from '../support/auth.ts';
import { createTestDatabase, type TestDatabase } from '../support/database.ts';
import { waitFor } from '../support/waitFor.ts';
import { testEmailHash } from '../support/personalData.ts';
import { testDataKeys } from '../support/dataKeys.ts';

/**
 * The typed client as another project gets it: `npm pack` of clients/typescript (its prepack
 * builds JavaScript and declarations), `npm install --offline` of that tarball and of its runtime
 * dependencies (packed from this project's node_modules, so no registry is asked) into a copy of
 * test/clients/consumer, tsc on the consumer with the package's own declarations, and Node running it against a live
 * gateway: login, create, list, a token that expires (the gateway's clock moves 16 minutes), and
 * a tenant bucket that runs dry.
 */
const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CLIENT_DIR = join(ROOT, 'clients/typescript');
const TSC = join(ROOT, 'node_modules/typescript/bin/tsc');

let work: string;
let project: string;
let db: TestDatabase;
let store: EventStore;
let projector: ProjectorHandle;
let auth: AuthDeps;
let app: FastifyInstance;
let baseUrl: string;
/** The consumer's Node process, ended in afterAll if a failed assertion left it running. */
let consumer: ChildProcess | undefined;
/** What consumer.ts reports (its own type: that file compiles against the installed package only). */
type Call = { method: string; path: string; status: number; retryAfter: string | null; at: number };
type Report = {
  wrongStatus: number | null;
  created: { id: string; status: number; location: string | null };
  listedIds: string[];
  afterExpiry: { status: number; email: string | null };
  refreshed: boolean;
  reads: number[];
  calls: Call[];
};

/** How far the gateway's clock is ahead of the real one. */
let skewMs = 0;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'eas-client-'));
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  projector = runProjection(db.pool, store, employeesProjection, { pollIntervalMs: 100 });
  await waitFor(() => readCheckpoint(db.pool, employeesProjection.name));
  auth = await createTestAuth(db.pool, { now: () => Date.now() + skewMs });
  const registry = new Registry();
  const limiter = createRateLimiter({ store: createMemoryRateLimitStore(), failOpen: false, registry, logger: pino({ level: 'silent' }) });
  app = await createGateway({
    config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
    readiness: [],
    registry,
    v1: [
      authRoutes(auth),
      authenticated(
        auth,
        rateLimited(limiter),
        sessionRoutes(auth),
        rolesRoutes(auth),
        employeesCapability({
          pool: db.pool,
          eventStore: store,
          log: store,
          logInDatabase: true,
          emailHash: testEmailHash,
          dataKeys: testDataKeys(db.pool),
        }),
      ),
    ],
  });
  baseUrl = await app.listen({ host: '127.0.0.1', port: 0 });
}, 120_000);

afterAll(async () => {
  if (consumer && consumer.exitCode === null && consumer.signalCode === null) consumer.kill('SIGKILL');
  await app?.close();
  await auth?.close();
  await projector?.stop();
  await store?.close();
  await db?.drop();
  if (work) await rm(work, { recursive: true, force: true });
});

/** Where Node would find `name` from a package in `from`: its own node_modules, then each parent folder's. */
async function packageDir(name: string, from: string): Promise<string> {
  for (let dir = from; ; dir = dirname(dir)) {
    const candidate = join(dir, 'node_modules', name);
    if (
      await readFile(join(candidate, 'package.json')).then(
        () => true,
        () => false,
      )
    )
      return candidate;
    if (dirname(dir) === dir) throw new Error(`${name} is not installed (needed from ${from})`);
  }
}

/**
 * Tarballs of the client's runtime dependencies, transitively, packed from the copies this
 * project installed: `npm install --offline` then needs no registry (a fresh clone's npm cache
 * may lack the packages' metadata, and tests must not depend on the network).
 */
async function packDependencies(manifestDir: string, into: string, seen = new Set<string>()): Promise<string[]> {
  const manifest = JSON.parse(await readFile(join(manifestDir, 'package.json'), 'utf8')) as { dependencies?: Record<string, string> };
  const tarballs: string[] = [];
  for (const name of Object.keys(manifest.dependencies ?? {})) {
    const dir = await packageDir(name, manifestDir);
    if (seen.has(dir)) continue;
    seen.add(dir);
    const { stdout } = await run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', into, dir], { cwd: into });
    const [packed] = JSON.parse(stdout) as Array<{ filename: string }>;
    tarballs.push(join(into, packed?.filename ?? ''), ...(await packDependencies(dir, into, seen)));
  }
  return tarballs;
}

describe('when another project installs the packed client', () => {
  it('packs a tarball with JavaScript, declarations and the README, and nothing else', async () => {
    // Left over from an earlier build of a source file since removed: the build starts from an empty dist/.
    await mkdir(join(CLIENT_DIR, 'dist'), { recursive: true });
    await writeFile(join(CLIENT_DIR, 'dist', 'removed.js'), 'export {};\n');
    const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', work], { cwd: CLIENT_DIR, timeout: 120_000 });
    const [packed] = JSON.parse(stdout) as Array<{ filename: string; name: string; files: Array<{ path: string }> }>;
    expect(packed?.name).toBe('@employee-analytics/client');
    expect(packed?.files.map((f) => f.path).sort()).toEqual([
      'README.md',
      'dist/index.d.ts',
      'dist/index.js',
      'dist/schema.d.ts',
      'package.json',
    ]);

    project = join(work, 'consumer');
    await cp(join(ROOT, 'test/clients/consumer'), project, { recursive: true });
    const dependencies = await packDependencies(CLIENT_DIR, work);
    expect(dependencies.length).toBeGreaterThan(0);
    // An empty npm cache, as on a fresh clone: --offline fails (ENOTCACHED) if anything is missing.
    await run('npm', ['install', '--offline', '--no-audit', '--no-fund', join(work, packed?.filename ?? ''), ...dependencies], {
      cwd: project,
      env: { ...process.env, npm_config_cache: join(work, 'npm-cache') },
      timeout: 240_000,
    });
  }, 300_000);

  it('type-checks a consumer against the package’s declarations (tsc)', async () => {
    if (!project) throw new Error('the package was not installed');
    const checked = await run(process.execPath, [TSC, '-p', join(project, 'tsconfig.json')], { cwd: project }).catch(
      (error: { stdout?: string; code?: number }) => error,
    );
    expect('code' in checked ? checked.stdout : '').toBe('');
  }, 120_000);

  it('signs in, creates, lists, refreshes after the token expired and waits out a 429, on Node 24', async () => {
    if (!project) throw new Error('the package was not installed');
    const tenant = await provisionTenant(db.pool, { plan: 'starter', rateLimitOverride: { perMinute: 30, burst: 3 } });
    const user = await createTestUser(db.pool, tenant, 'hr_manager');
    const config = { baseUrl, tenant: tenant.slug, email: user.email, password: user.password };

    const child = spawn(process.execPath, [join(project, 'run.mjs'), JSON.stringify(config)], { cwd: project });
    consumer = child;
    let stdout = '';
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      if (stdout.includes('EXPIRE\n') && skewMs === 0) {
        skewMs = 16 * 60_000; // past the access token's 15 minutes
        child.stdin.write('go\n');
      }
    });
    expect(await exited, stderr).toBe(0);
    expect(process.versions.node.split('.')[0]).toBe('24');
    const report = JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as Report;

    expect(report.wrongStatus).toBe(401);
    expect(report.created).toEqual({ id: expect.any(String), status: 201, location: `/v1/employees/${report.created.id}` });
    expect(report.listedIds).toContain(report.created.id);

    // The expired token was refused once, refreshed, and the call repeated.
    expect(report.afterExpiry).toEqual({ status: 200, email: 'grace@example.test' });
    expect(report.refreshed).toBe(true);
    const get = report.calls.filter((c) => c.method === 'GET' && c.path === `/v1/employees/${report.created.id}`).map((c) => c.status);
    expect(get).toEqual([401, 200]);
    expect(report.calls.filter((c) => c.path === '/v1/auth/refresh').map((c) => c.status)).toEqual([200]);

    // The bucket ran dry: the 429 was sent again after its Retry-After and succeeded.
    const refusedAt = report.calls.findIndex((c) => c.status === 429);
    const refused = report.calls[refusedAt];
    const retried = report.calls[refusedAt + 1];
    if (!refused || !retried) throw new Error(`no 429 and retry in ${JSON.stringify(report.calls)}`);
    expect(Number(refused.retryAfter)).toBeGreaterThan(0);
    expect(retried).toMatchObject({ method: 'GET', path: '/v1/employees', status: 200 });
    expect(retried.at - refused.at).toBeGreaterThanOrEqual(Number(refused.retryAfter) * 1000 - 50);
    expect(report.reads.every((status) => status === 200)).toBe(true);
  }, 120_000);
});
