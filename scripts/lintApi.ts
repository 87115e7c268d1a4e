import { execFile } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { createDatabasePool, type DatabasePool } from '../shared/db/pool.ts';
import { openApiDocument } from './generateClient.ts';

/**
 * `npm run lint:api`: lints the OpenAPI document the gateway generates, as an integrator's tools
 * would, with Spectral (`spectral:oas` + the OWASP API Top 10 ruleset, `.spectral.yaml`) and
 * Redocly (`recommended`, `redocly.yaml`). Exits 1 on any error; warnings are printed only. The
 * document is written to `.tmp/openapi.json` (Spectral's overrides name that path). The test
 * suite runs the same check (test/services/gateway/apiLint.test.ts), and that is how CI runs it.
 */
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const require = createRequire(import.meta.url);
const run = promisify(execFile);

/** A linter's bin run with this process's Node (24), not whatever `node` is on the PATH. */
function binOf(pkg: string, name: string): string {
  const manifest = require.resolve(`${pkg}/package.json`);
  const bin = (require(manifest) as { bin: Record<string, string> }).bin[name];
  if (!bin) throw new Error(`${pkg} has no bin ${name}`);
  return join(dirname(manifest), bin);
}

export type LintResult = { readonly tool: 'spectral' | 'redocly'; readonly ok: boolean; readonly output: string };

async function lintWith(tool: LintResult['tool'], args: string[]): Promise<LintResult> {
  const bin = tool === 'spectral' ? binOf('@stoplight/spectral-cli', 'spectral') : binOf('@redocly/cli', 'redocly');
  // No telemetry or update check: CI must not depend on (or report to) the network.
  const env = { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', NO_COLOR: '1' };
  try {
    const { stdout, stderr } = await run(process.execPath, [bin, ...args], { cwd: ROOT, env, maxBuffer: 16 * 1024 * 1024 });
    return { tool, ok: true, output: stdout + stderr };
  } catch (error) {
    const failed = error as { stdout?: string; stderr?: string; code?: unknown };
    if (typeof failed.code !== 'number') throw error; // the linter did not run at all
    return { tool, ok: false, output: `${failed.stdout ?? ''}${failed.stderr ?? ''}` };
  }
}

/** Both linters on a document file (a path under the project's .tmp/); each result says whether it found no error. */
export async function lintOpenApiFile(file: string): Promise<LintResult[]> {
  const path = relative(ROOT, file);
  return Promise.all([
    lintWith('spectral', ['lint', '--ruleset', '.spectral.yaml', '--fail-severity', 'error', path]),
    lintWith('redocly', ['lint', '--config', 'redocly.yaml', '--format', 'stylish', path]),
  ]);
}

/** Writes the live document to `dir/openapi.json`; returns the file's path. */
export async function writeLiveDocument(pool: DatabasePool, dir = join(ROOT, '.tmp')): Promise<string> {
  await mkdir(dir, { recursive: true });
  const file = join(dir, 'openapi.json');
  await writeFile(file, `${JSON.stringify(await openApiDocument(pool), null, 2)}\n`);
  return file;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const pool = await createDatabasePool(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres');
  let results: LintResult[];
  try {
    results = await lintOpenApiFile(await writeLiveDocument(pool));
  } finally {
    await pool.end();
  }
  for (const result of results) process.stdout.write(`── ${result.tool}: ${result.ok ? 'no errors' : 'ERRORS'}\n${result.output}\n`);
  process.exitCode = results.every((result) => result.ok) ? 0 : 1;
}
